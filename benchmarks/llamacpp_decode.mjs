// llama.cpp's side of benchmarks/bench_llamacpp.py: greedy completions under each request's JSON-schema grammar,
// one request at a time, on a GGUF, through node-llama-cpp (prebuilt llama.cpp from the npm registry).
//
//     node benchmarks/llamacpp_decode.mjs NODE_DIR MODEL.gguf REQUESTS.json OUT.json THREADS
//
// NODE_DIR holds node_modules/node-llama-cpp (`npm install node-llama-cpp @node-llama-cpp/linux-x64`). Each request
// is {"tokens": [...prompt token ids...], "schema": {...}, "max_tokens": n}: the prompt is CLAP's rendered chat
// template, tokenized by CLAP, so both decoders start from the same ids. Writes, per request, the text, the
// tokens generated and the wall milliseconds from the first prompt token to the last generated one.
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [nodeDir, modelPath, requestsPath, outPath, threads] = process.argv.slice(2);
const { getLlama, LlamaCompletion } = await import(
    pathToFileURL(join(nodeDir, "node_modules", "node-llama-cpp", "dist", "index.js")).href);

const requests = JSON.parse(readFileSync(requestsPath, "utf8"));
const llama = await getLlama({ gpu: false, build: "never", maxThreads: Number(threads) });
const loadStart = performance.now();
const model = await llama.loadModel({ modelPath });
const longest = Math.max(...requests.map((r) => r.tokens.length + r.max_tokens));
const context = await model.createContext({ contextSize: Math.max(512, longest + 16), threads: Number(threads) });
const loadMs = performance.now() - loadStart;
const sequence = context.getSequence();
const completion = new LlamaCompletion({ contextSequence: sequence });

// JSON Schema's anyOf is node-llama-cpp's oneOf (an alternation in the grammar either way)
const toGbnfSchema = (s) => Array.isArray(s) ? s.map(toGbnfSchema)
    : s && typeof s === "object" ? Object.fromEntries(Object.entries(s).map(([k, v]) => [k === "anyOf" ? "oneOf" : k,
        toGbnfSchema(v)])) : s;

const results = [];
for (const r of requests) {
    const grammarStart = performance.now();
    const grammar = await llama.createGrammarForJsonSchema(toGbnfSchema(r.schema));
    const grammarMs = performance.now() - grammarStart;
    await sequence.clearHistory();  // no prefix kept from the previous request: each is decoded from its own prompt
    let generated = 0;
    const start = performance.now();
    const text = await completion.generateCompletion(r.tokens, {
        grammar, maxTokens: r.max_tokens, temperature: 0, onToken: (tokens) => { generated += tokens.length; } });
    results.push({ text, new_tokens: generated, ms: performance.now() - start, grammar_ms: grammarMs });
}
writeFileSync(outPath, JSON.stringify({ load_ms: loadMs, threads: Number(threads), results }));
await context.dispose();
await model.dispose();
