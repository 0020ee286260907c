// The official `openai` npm client against the real `tinyserve serve` binary (stories260K on a
// random loopback port, with an API key): completions and chat, plain and streamed, prompt
// scoring with echo + logprobs, the model list, and the client's error classes for a wrong key,
// an unknown model and a bad request.
// Run by ctest (label clients) through run_tests.sh, which sets TINYSERVE_BINARY.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import OpenAI from 'openai';

const API_KEY = 'tinyserve-test-key';
const MODEL = 'tiny';
let server;
let baseURL;
let client;

before(async () => {
  const binary = process.env.TINYSERVE_BINARY;
  assert.ok(binary, 'TINYSERVE_BINARY must name the tinyserve binary');
  const args = ['serve', '--port', '0', '--served-model-name', MODEL, '--api-key', API_KEY,
                '--threads', '1'];
  if (process.env.TINYSERVE_TEST_MODEL) args.push('--model', process.env.TINYSERVE_TEST_MODEL);
  server = spawn(binary, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server did not start:\n${log}`)), 30000);
    server.stderr.on('data', (data) => {
      log += data;
      const m = log.match(/on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve(Number(m[1]));
      }
    });
    server.on('exit', (code) => reject(new Error(`server exited (${code}):\n${log}`)));
  });
  baseURL = `http://127.0.0.1:${port}/v1`;
  client = new OpenAI({ apiKey: API_KEY, baseURL, maxRetries: 0 });
});

after(async () => {
  if (!server || server.exitCode !== null) return;
  const exited = new Promise((resolve) => server.on('exit', resolve));
  server.kill('SIGTERM');
  assert.equal(await exited, 0, 'tinyserve serve exits 0 on SIGTERM');
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
