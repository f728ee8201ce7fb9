// transformers.js's apply_chat_template, run by Node with the pinned npm packages.
//
//   node worker.mjs <@huggingface/jinja dir> <@huggingface/tokenizers dir>
//
// JSON lines on stdin/stdout. The first line read is the model: {"tokenizer_dir", "template",
// "date"}; the first line written names the versions ({"jinja", "tokenizers"}). Then each
// line {"request": <chat body>} gets one answer {"ids", "pieces", "prompt"} or {"refused"}.
//
// The render is transformers.js's PreTrainedTokenizer.apply_chat_template
// (src/base/tokenization_utils.js): `new Template(chat_template)` from @huggingface/jinja,
// rendered with {messages, add_generation_prompt, tools, documents, the config's named special
// tokens (getTokenFromConfig), ...kwargs}, then encoded by @huggingface/tokenizers with
// add_special_tokens false. transformers.js has no continue_final_message: the flag is not
// passed, as a client of it could not pass it. @huggingface/jinja's strftime_now reads
// `new Date()`; the Date the worker sees is pinned to the matrix's date at noon, as the
// reference pins its own.

import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { join } from "node:path";
import { pathToFileURL } from "node:url";

const [jinjaDir, tokenizersDir] = process.argv.slice(2);
const version = (dir) => JSON.parse(readFileSync(join(dir, "package.json"), "utf8")).version;
const { Template } = await import(pathToFileURL(join(jinjaDir, "dist", "index.js")).href);
const { Tokenizer } = await import(pathToFileURL(join(tokenizersDir, "dist", "tokenizers.mjs")).href);

const SPECIAL_TOKEN_ATTRIBUTES = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"];

function tokenFromConfig(config, key) {
  // getTokenFromConfig: a string, or an AddedToken object's content
  if (!Object.hasOwn(config, key) || !config[key]) return null;
  const item = config[key];
  if (typeof item === "object") {
    if (item.__type === "AddedToken") return item.content;
    throw Error(`Unknown token: ${item}`);
  }
  return item;
}

function pinDate(isoDate) {
  const RealDate = Date;
  const fixed = new RealDate(`${isoDate}T12:00:00`).getTime();
  globalThis.Date = class extends RealDate {
    constructor(...args) { super(...(args.length ? args : [fixed])); }
    static now() { return fixed; }
  };
}

const lines = createInterface({ input: process.stdin, crlfDelay: Infinity })[Symbol.asyncIterator]();
const write = (value) => process.stdout.write(JSON.stringify(value) + "\n");

const first = await lines.next();
const model = JSON.parse(first.value);
pinDate(model.date);
const config = JSON.parse(readFileSync(join(model.tokenizer_dir, "tokenizer_config.json"), "utf8"));
const tokenizer = new Tokenizer(JSON.parse(readFileSync(join(model.tokenizer_dir, "tokenizer.json"), "utf8")), config);
const template = new Template(model.template);
const specials = Object.create(null);
for (const key of SPECIAL_TOKEN_ATTRIBUTES) {
  const value = tokenFromConfig(config, key);
  if (value) specials[key] = value;
}
write({ jinja: version(jinjaDir), tokenizers: version(tokenizersDir) });

function piece(id) {
  const text = tokenizer.decode([id], { skip_special_tokens: false });
  return text.includes("\ufffd") ? tokenizer.id_to_token(id) : text;
}

for (let line = await lines.next(); !line.done; line = await lines.next()) {
  if (!line.value.trim()) continue;
  const request = JSON.parse(line.value).request;
  let prompt;
  try {
    prompt = template.render({
      messages: request.messages,
      add_generation_prompt: request.add_generation_prompt ?? false,
      tools: request.tools ?? null,
      documents: request.documents ?? null,
      ...specials,
      ...(request.chat_template_kwargs ?? {}),
    });
  } catch (error) {
    write({ refused: `${error.name}: ${error.message}` });
    continue;
  }
  const ids = tokenizer.encode(prompt, { add_special_tokens: false }).ids;
  write({ ids, prompt, pieces: ids.map(piece) });
}
