// The official `openai` npm client against the real `tinyserve serve` binary (stories260K on a
// random loopback port, with an API key): completions and chat, plain and streamed, prompt
// scoring with echo + logprobs, the model list, and the client's error classes for a wrong key,
// an unknown model and a bad request; structured outputs validated by ajv, zod parsing, and a
// tool-calling round trip.
// Run by ctest (label clients) through run_tests.sh, which sets TINYSERVE_BINARY.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';
import { zodResponseFormat } from 'openai/helpers/zod';
import Ajv from 'ajv';
import addFormats from 'ajv-formats';
import { z } from 'zod';

const API_KEY = 'tinyserve-test-key';
const MODEL = 'tiny';
let server;
let baseURL;
let client;
let modelDir;
let qwenServer;
let qwenClient;

// Starts `tinyserve serve` on a random loopback port; resolves to the process and its port.
async function startServer(binary, extraArgs) {
  const args = ['serve', '--port', '0', '--served-model-name', MODEL, '--api-key', API_KEY,
                '--threads', '1', ...extraArgs];
  const proc = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${log}`)), 30000);
    proc.stderr.on('data', (data) => {
      log += data;
      const m = log.match(/on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    proc.on('exit', (code) => reject(new Error(`server exited (${code}):\n${log}`)));
  });
  return { proc, port };
}

async function stopServer(proc) {
  if (!proc || proc.exitCode !== null) return;
  const exited = new Promise((resolve) => proc.on('exit', resolve));
  proc.kill('SIGTERM');
  assert.equal(await exited, 0, 'tinyserve serve exits 0 on SIGTERM');
}

before(async () => {
  const binary = process.env.TINYSERVE_BINARY;
  assert.ok(binary, 'TINYSERVE_BINARY must name the tinyserve binary');
  const extra = process.env.TINYSERVE_TEST_MODEL ? ['--model', process.env.TINYSERVE_TEST_MODEL] : [];
  const started = await startServer(binary, extra);
  server = started.proc;
  baseURL = `http://127.0.0.1:${started.port}/v1`;
  client = new OpenAI({ apiKey: API_KEY, baseURL, maxRetries: 0 });
  // A generated model beside stories260K: a qwen2.5-shaped GGUF (seeded random weights, byte-level
  // BPE, a 4096-token context, the qwen2.5 template with its <tool_call> format).
  modelDir = mkdtempSync(join(tmpdir(), 'tinyserve-client-'));
  const model = join(modelDir, 'qwen-small.gguf');
  execFileSync(binary, ['gen-model', '--preset', 'qwen2.5-0.5b', '--format', 'gguf', '--small',
                        '--out', model], { stdio: 'ignore' });
  const qwen = await startServer(binary, ['--model', model, '--num-kv-blocks', '256']);
  qwenServer = qwen.proc;
  qwenClient = new OpenAI({ apiKey: API_KEY, baseURL: `http://127.0.0.1:${qwen.port}/v1`, maxRetries: 0 });
});

after(async () => {
  await stopServer(server);
  await stopServer(qwenServer);
  if (modelDir) rmSync(modelDir, { recursive: true, force: true });
});

const prompt = 'Once upon a time';
const messages = [
  { role: 'system', content: 'Tell a story.' },
  { role: 'user', content: 'Once upon a time' },
];

test('completions.create, plain and streamed, give the same greedy text', async () => {
  const plain = await client.completions.create({
    model: MODEL, prompt, max_tokens: 24, temperature: 0,
  });
  assert.equal(plain.object, 'text_completion');
  assert.equal(plain.model, MODEL);
  assert.equal(plain.choices.length, 1);
  assert.equal(plain.choices[0].finish_reason, 'length');
  assert.ok(plain.choices[0].text.length > 0);
  assert.deepEqual(plain.usage, { prompt_tokens: 5, total_tokens: 29, completion_tokens: 24 });

  const stream = await client.completions.create({
    model: MODEL, prompt, max_tokens: 24, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  for await (const chunk of stream) {
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      text += c.text;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(text, plain.choices[0].text);
  assert.equal(finish, 'length');
  assert.equal(usage.completion_tokens, 24);
});

test('chat.completions.create, plain and streamed, give the same greedy text', async () => {
  const plain = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 20, temperature: 0,
  });
  assert.equal(plain.object, 'chat.completion');
  assert.equal(plain.choices[0].message.role, 'assistant');
  assert.equal(typeof plain.choices[0].message.content, 'string');
  assert.equal(plain.usage.completion_tokens, 20);

  const stream = await client.chat.completions.create({
    model: MODEL, messages, max_tokens: 20, temperature: 0, stream: true,
  });
  let content = '';
  let role = null;
  let finish = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    for (const c of chunk.choices) {
      if (c.delta.role) role = c.delta.role;
      if (c.delta.content) content += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(role, 'assistant');
  assert.equal(content, plain.choices[0].message.content);
  assert.equal(finish, 'length');
});

test('echo with logprobs and max_tokens 0 scores the prompt (lm-evaluation-harness)', async () => {
  const scored = await client.completions.create({
    model: MODEL, prompt, max_tokens: 0, echo: true, logprobs: 1, temperature: 0,
  });
  const c = scored.choices[0];
  assert.equal(c.text, prompt);
  assert.equal(c.finish_reason, 'length');
  assert.equal(c.logprobs.tokens.length, 5);  // BOS + 4 prompt tokens
  assert.equal(c.logprobs.token_logprobs[0], null);
  assert.equal(c.logprobs.top_logprobs[0], null);
  for (let i = 1; i < 5; ++i) {
    assert.ok(c.logprobs.token_logprobs[i] < 0);
    assert.ok(c.logprobs.tokens[i] in c.logprobs.top_logprobs[i]);
  }
  assert.equal(scored.usage.completion_tokens, 0);
  // vLLM's prompt_logprobs list comes with them: null, then {token id: {logprob, rank, ...}}.
  assert.equal(c.prompt_logprobs.length, 5);
  assert.equal(c.prompt_logprobs[0], null);
  for (let i = 1; i < 5; ++i) {
    const entries = Object.values(c.prompt_logprobs[i]);
    assert.ok(entries.some((e) => e.logprob === c.logprobs.token_logprobs[i]));
  }
});

test('vLLM\'s prompt_logprobs field passes through the client (chat too)', async () => {
  const chat = await client.chat.completions.create({
    model: MODEL, messages: [{ role: 'user', content: prompt }], max_tokens: 1, prompt_logprobs: 1,
  });
  assert.equal(chat.prompt_logprobs.length, chat.usage.prompt_tokens);
  assert.equal(chat.prompt_logprobs[0], null);
  for (const entry of chat.prompt_logprobs.slice(1)) {
    for (const e of Object.values(entry)) {
      assert.ok(e.logprob <= 0 && e.rank >= 1 && typeof e.decoded_token === 'string');
    }
  }
});

test('models.list names the served model', async () => {
  const ids = [];
  for await (const model of client.models.list()) ids.push(model.id);
  assert.deepEqual(ids, [MODEL]);
});

test('a wrong API key is an AuthenticationError', async () => {
  const wrong = new OpenAI({ apiKey: 'wrong-key', baseURL, maxRetries: 0 });
  await assert.rejects(
    wrong.completions.create({ model: MODEL, prompt, max_tokens: 1 }),
    (err) => err instanceof OpenAI.AuthenticationError && err.status === 401);
});

test('an unknown model is a NotFoundError, a bad field a BadRequestError', async () => {
  await assert.rejects(
    client.completions.create({ model: 'gpt-4', prompt, max_tokens: 1 }),
    (err) => err instanceof OpenAI.NotFoundError && err.status === 404);
  await assert.rejects(
    client.completions.create({ model: MODEL, prompt, max_tokens: 1, temperature: -1 }),
    (err) => err instanceof OpenAI.BadRequestError && err.param === 'temperature');
});

// Structured outputs (issue 21): every json_schema output of a small catalogue, sampled at
// temperature 1 with fixed seeds, validates under ajv (with ajv-formats).
const ajv = new Ajv({ allErrors: true, strict: false });
addFormats(ajv);

const schemas = [
  { type: 'object', properties: { name: { type: 'string', maxLength: 20 }, age: { type: 'integer', minimum: 0, maximum: 120 } }, required: ['name', 'age'], additionalProperties: false },
  { type: 'array', items: { type: 'integer' }, minItems: 1, maxItems: 4 },
  { type: 'object', properties: { mood: { enum: ['happy', 'sad', 'calm'] }, ok: { type: 'boolean' }, note: { type: 'null' } }, required: ['mood', 'ok'] },
  { type: 'object', properties: { day: { type: 'string', format: 'date' }, id: { type: 'string', format: 'uuid' } }, required: ['day', 'id'], additionalProperties: false },
  { anyOf: [{ type: 'number', minimum: 0 }, { type: 'string', maxLength: 8 }] },
  { $defs: { node: { type: 'object', properties: { v: { type: 'integer' }, next: { anyOf: [{ $ref: '#/$defs/node' }, { type: 'null' }] } }, required: ['v', 'next'], additionalProperties: false } }, $ref: '#/$defs/node' },
];

test('response_format json_schema outputs validate under ajv (chat and completions)', async () => {
  for (const [i, schema] of schemas.entries()) {
    const validate = ajv.compile(schema);
    for (const seed of [1, 2]) {
      const chat = await client.chat.completions.create({
        model: MODEL, messages, temperature: 1, seed, max_tokens: 400,
        response_format: { type: 'json_schema', json_schema: { name: `s${i}`, schema, strict: true } },
      });
      const text = chat.choices[0].message.content;
      assert.equal(chat.choices[0].finish_reason, 'stop', `schema ${i} seed ${seed}: ${text}`);
      assert.ok(validate(JSON.parse(text)), `schema ${i} seed ${seed}: ${text} ${ajv.errorsText(validate.errors)}`);
    }
    const completion = await client.completions.create({
      model: MODEL, prompt, temperature: 1, seed: 3, max_tokens: 400,
      response_format: { type: 'json_schema', json_schema: { name: `s${i}`, schema } },
    });
    const text = completion.choices[0].text;
    assert.equal(completion.choices[0].finish_reason, 'stop', `schema ${i}: ${text}`);
    assert.ok(validate(JSON.parse(text)), `schema ${i}: ${text} ${ajv.errorsText(validate.errors)}`);
  }
});

// The catalogue the grammar engine's own random-walk test uses (tests/structured): one seeded
// temperature-1 chat per schema on each model. ajv 8 does not read draft-04 schemas: those are
// left to python3-jsonschema in that test.
const catalogue = JSON.parse(readFileSync(new URL('../structured/json_schema_catalogue.json', import.meta.url)));

test('the json_schema catalogue: outputs on stories260K and a generated model validate under ajv', async () => {
  const drafts = catalogue.filter((schema) => !String(schema.$schema ?? '').includes('draft-04'));
  assert.ok(drafts.length >= 30, `${drafts.length} schemas`);
  // A random model can run out of max_tokens inside an unbounded string or object (finish
  // "length": a prefix, not a document); every output that stopped must validate, and most stop.
  const unfinished = [];
  let total = 0;
  for (const [name, c] of [['stories260K', client], ['qwen-small', qwenClient]]) {
    for (const [i, schema] of drafts.entries()) {
      const validate = ajv.compile(schema);
      const chat = await c.chat.completions.create({
        model: MODEL, messages, temperature: 1, seed: 100 + i, max_tokens: 400,
        response_format: { type: 'json_schema', json_schema: { name: `c${i}`, schema } },
      });
      ++total;
      const text = chat.choices[0].message.content;
      const where = `${name} schema ${i} ${JSON.stringify(schema)}: ${text}`;
      if (chat.choices[0].finish_reason === 'length') {
        unfinished.push(`${name} schema ${i}`);
        continue;
      }
      assert.equal(chat.choices[0].finish_reason, 'stop', where);
      assert.ok(validate(JSON.parse(text)), `${where} ${ajv.errorsText(validate.errors)}`);
    }
  }
  console.log(`catalogue: ${total - unfinished.length} of ${total} stopped; length: ${unfinished.join(', ')}`);
  assert.ok(unfinished.length * 10 <= total * 2, `too many unfinished: ${unfinished.join(', ')}`);
});

test('chat.completions.parse and .stream with a zod schema give the parsed object', async () => {
  const Pet = z.object({
    name: z.string().max(16),
    legs: z.number().int().min(0).max(8),
    kind: z.enum(['cat', 'dog', 'bird']),
  });
  const response_format = zodResponseFormat(Pet, 'pet');
  const parsed = await client.chat.completions.parse({
    model: MODEL, messages, temperature: 1, seed: 11, max_tokens: 300, response_format,
  });
  const message = parsed.choices[0].message;
  assert.equal(parsed.choices[0].finish_reason, 'stop', message.content);
  assert.deepEqual(message.parsed, Pet.parse(JSON.parse(message.content)));

  const stream = client.chat.completions.stream({
    model: MODEL, messages, temperature: 1, seed: 11, max_tokens: 300, response_format,
  });
  const final = await stream.finalChatCompletion();
  assert.equal(final.choices[0].message.content, message.content, 'streamed = plain (same seed)');
  assert.deepEqual(final.choices[0].message.parsed, message.parsed);
});

test('a tool-calling round trip: the forced call is parsed, its result sent back, answered', async () => {
  // The tools' preamble does not fit stories260K's 512-token context: the generated model serves.
  await toolRoundTrips(qwenClient);
});

async function toolRoundTrips(client) {
  const tools = [{
    type: 'function',
    function: {
      name: 'get_weather', description: 'The weather in a city',
      parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 12 } }, required: ['city'], additionalProperties: false },
    },
  }];
  for (const streamed of [false, true]) {
    const request = {
      model: MODEL, messages, tools, tool_choice: 'required', parallel_tool_calls: false,
      temperature: 1, seed: 7, max_tokens: 300,
    };
    const first = streamed
      ? await client.chat.completions.stream(request).finalChatCompletion()
      : await client.chat.completions.create(request);
    const choice = first.choices[0];
    assert.equal(choice.finish_reason, 'tool_calls', JSON.stringify(choice));
    assert.equal(choice.message.tool_calls.length, 1);
    const call = choice.message.tool_calls[0];
    assert.equal(call.type, 'function');
    assert.equal(call.function.name, 'get_weather');
    const args = JSON.parse(call.function.arguments);
    assert.equal(typeof args.city, 'string');
    assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);

    const next = await client.chat.completions.create({
      model: MODEL, tools, temperature: 0, max_tokens: 8,
      messages: [...messages, choice.message, { role: 'tool', tool_call_id: call.id, content: 'sunny, 21 C' }],
    });
    assert.equal(next.choices[0].message.role, 'assistant');
    assert.ok(next.choices[0].message.content.length > 0);
  }
}
