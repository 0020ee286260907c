// llama.cpp's decode tokens/s on a GGUF file, through node-llama-cpp's prebuilt CPU build (the
// package the oracle suite pins), shaped like bench/decode_bench: each of --batch sequences is
// prefilled with --prompt-len tokens, then --decode-tokens steps decode one token per sequence
// (greedy), the sequences of a step in one llama_decode batch. Not a test: bench/RESULTS.md
// compares it with decode_bench on the same file.
//
// Usage: node llamacpp_decode_bench.mjs --model FILE [--threads 2] [--batch 1,32]
//        [--decode-tokens 32] [--prompt-len 16] [--flash-attention 1]
import {getLlama, LlamaLogLevel} from "node-llama-cpp";

const a = {threads: "2", batch: "1,32", "decode-tokens": "32", "prompt-len": "16",
           "flash-attention": "1"};
for (let i = 2; i < process.argv.length; i += 2) a[process.argv[i].replace(/^--/, "")] = process.argv[i + 1];
if (!a.model) throw new Error("missing --model");
const llama = await getLlama({gpu: false, build: "never", logLevel: LlamaLogLevel.error});
const model = await llama.loadModel({modelPath: a.model, gpuLayers: 0});
const steps = Number(a["decode-tokens"]), promptLen = Number(a["prompt-len"]);
console.log(`llama.cpp ${llama.llamaCppRelease.release} (node-llama-cpp), ${a.model}, threads ${a.threads}, flash attention ${a["flash-attention"]}`);
for (const batch of a.batch.split(",").map(Number)) {
  const context = await model.createContext({
    contextSize: batch * (promptLen + steps + 8), batchSize: Math.max(512, batch * promptLen),
    sequences: batch, threads: Number(a.threads), flashAttention: a["flash-attention"] === "1",
  });
  const seqs = Array.from({length: batch}, () => context.getSequence());
  const want = {generateNext: {token: true}};
  // Prefill: prompt ids 3.. (as decode_bench), the next token sampled greedily.
  let next = await Promise.all(seqs.map(async (s, b) => {
    const prompt = Array.from({length: promptLen}, (_, i) => 3 + ((b * 131 + i * 17) % 500));
    const out = await s.controlledEvaluate(prompt.map((t, i) => i === promptLen - 1 ? [t, want] : t));
    return out[promptLen - 1].next.token;
  }));
  const start = process.hrtime.bigint();
  for (let i = 0; i < steps; i++) {
    next = await Promise.all(seqs.map(async (s, b) => (await s.controlledEvaluate([[next[b], want]]))[0].next.token));
  }
  const secs = Number(process.hrtime.bigint() - start) / 1e9;
  console.log(`| llama.cpp | batch ${batch} | ${(batch * steps / secs).toFixed(1)} tok/s |`);
  await context.dispose();
}
