"""Sort each finding of an outside-bodies check (a goldens check --results file) into a cause, and say
whether the committed matrix shows that cause: `shown-before` (a ledger entry, reviewed cause or
invariant of the matrix before the outside bodies were tried), `shown-now` (shown by a dialect the
first or second outside batch added: docs/dialects.md), or `not-shown`; `goldens-own` is a finding goldens
itself makes (its invariant checker, its harmony engine's adapter), no engine's or template's cause. The
rules are ordered; the first that matches wins. The broad `shown-before` rules (an engine's own
rendering of gpt-oss or Mistral NeMo, the as-sent engines) were checked against each finding they
took on 2026-12-05 (first batch, bodies/) and again on the second batch (bodies2/, whose causes the matrix did not
show at first come first below); a new finding they take needs the same look (`--list CAUSE-PREFIX`
prints them).

    python bench/outside/classify.py out/outside.json [--list CAUSE-PREFIX]
    python bench/outside/classify.py out/outside-bodies2.json
    python bench/outside/classify.py out/outside-bodies4.json
"""
from __future__ import annotations

import json
import re
import sys
from collections import Counter, defaultdict

LISTED = 8  # findings printed under each not-shown cause (--list prints them all)

# (cause, status, engine regex, case regex, detail regex), first match wins
RULES = [
    # a reviewed cause copied into the scratch folder that no case of the scratch matrix shows any
    # more (`goldens check` reports it stale, as case MODEL/causes:NAME): the outside bodies are not
    # the cases it was reviewed on, so it is no finding (counted apart since the fourth batch)
    ("stale reviewed cause in the scratch matrix (not a finding)", "artifact", r".", r"/causes:", r"."),
    # --- fourth batch (bodies4/, captured from client libraries): measured once; these rules sort
    # the findings the rules below did not (each read against the engine's output and the committed
    # ledger, reviewed causes, invariant reviews and reference disputes); they change no case
    ("vLLM on Kimi-K3 writes a required tool_choice and response_format into the prompt (a system message "
     "type=\"tool-choice\" / \"response-format\"); the template ignores both", "not-shown", r"^vllm$",
     r"kimi-k3/(smolagents-agent-[12]|instructor-json-schema-1)$", r"drift at token"),
    ("llama-server on DeepSeek-V4 writes response_format's schema into the system prompt (\"## Response Format\"); "
     "the references ignore it", "not-shown", r"llama-server", r"deepseek-v4/instructor-json-schema-1(--thinking)?$",
     r"drift at token 10 "),
    ("llama-server rebuilds a tool call's function as {name, arguments}: NeMo's template writes the keys in the "
     "order sent (agno and AutoGen send arguments first)", "not-shown", r"llama-server",
     r"mistral-nemo/(agno-agent-2|autogen-agent-2)$", r"drift at token"),
    ("harmony writes a parameter's `title` as its own comment line (`// City` then `//`), gpt-oss's template only "
     "the description", "not-shown", r"harmony|vllm", r"gpt-oss/(autogen-agent-1|instructor-tools-1)$",
     r"drift at token 11[35] "),
    ("a multi-line tool description: harmony comments every line, gpt-oss's template only the first", "shown-now",
     r"harmony|vllm", r"gpt-oss/llamaindex-agent-[12]$", r"drift at token 117 "),
    ("a multi-line tool description: mistral-common escapes its newlines, NeMo's template writes them", "shown-now",
     r"mistral-common|vllm", r"mistral-nemo/llamaindex-agent-1$", r"drift at token 42 "),
    ("the capture server's tool-call id `call_0001` (9 characters, not alphanumeric): mistral-common and vLLM "
     "(mistral mode) refuse it, NeMo's template checks the length only", "goldens-own", r"mistral-common|vllm",
     r"mistral-nemo/(agno|autogen|llamaindex|semantic-kernel)-agent-2$", r"Tool call id was call_0001"),
    ("llama-server rebuilds each tool from name, description and parameters: a function's `strict` is lost",
     "shown-before", r"llama-server",
     r"(qwen3|llama3|mistral-nemo|kimi-k3|deepseek-v4|glm-4\.7-flash|minimax-m3|qwen3\.5-4b)/(autogen-agent-1|llamaindex-agent-[12])"
     r"(--thinking(-off)?)?$", r"drift at token"),
    ("DeepSeek-V4: the references disagree on a tool history with no tools (reviewed dispute tool-history-no-tools)",
     "shown-before", r".", r"deepseek-v4/autogen-agent-2--thinking$", r"references disagree"),
    ("reference dispute entry of the committed matrix that covers no scratch case (not a finding)", "artifact",
     r"references", r".", r"stale models.yaml entry"),
    ("vLLM on DeepSeek-V4 thinks at high effort by default (reviewed causes vllm-dsv4-*)", "shown-before", r"^vllm$",
     r"deepseek-v4/", r"drift at token 1 "),
    ("llama-server on DeepSeek-V4 thinks and keeps reasoning by default (`<think></think>` on a past turn)",
     "shown-before", r"llama-server", r"deepseek-v4/(agno|autogen|semantic-kernel|smolagents)-agent-2$", r"drift at token"),
    ("DeepSeek-V4's and GLM-4.7-Flash's think tags in tool conversations (reviewed invariants)", "shown-before",
     r"invariants", r"(deepseek-v4|glm-4\.7-flash)/", r"<think> opened"),
    ("Gemma 4's template prints a system message given as text parts as a Python list (golden plain_one-part)",
     "shown-before", r"invariants", r"gemma4/smolagents-agent-[12]$", r"system message text not in the prompt"),
    ("Command R on llama-server renders tools with the tool_use template", "shown-before", r"llama-server",
     r"command-r/(agno|llamaindex|semantic-kernel)-agent-2$", r"the reference refused .* but llama-server rendered"),
    # --- third batch (bodies3/): measured once, after the derived dialects were built; these
    # rules sort its findings (each checked by hand against the engine's output and the ledger
    # entry or invariant review that shows the same refusal or edit), they change no case
    ("a tool call's arguments that are JSON but not an object (a JSON string, `\"{}\"`): llama-server and vLLM "
     "render the parsed value as {}, the reference keeps the string", "not-shown", r"llama-server",
     r"(qwen3|llama3|gpt-oss)/elixir-double-encoded-args", r"drift at token"),
    ("a tool call's arguments that are JSON but not an object (a JSON string, `\"{}\"`): llama-server and vLLM "
     "render the parsed value as {}, the reference keeps the string", "not-shown", r"^vllm$",
     r"(qwen3|llama3|gemma4)/elixir-double-encoded-args", r"drift at token"),
    ("vLLM refuses a tool call without `id` and a tool result without `tool_call_id` (its request model requires both)",
     "not-shown", r"^vllm$", r"/haystack-no-call-ids", r"ChatCompletionMessageFunctionToolCallParam\.id"),
    ("tool definitions re-serialized in the server's key order", "shown-before", r"llama-server|vllm",
     r"qwen3/lasagna-strict-tools(--thinking-off)?$", r"drift at token"),
    ("Llama 3.1 template drops an assistant's text beside its tool call (invariant)", "shown-now", r"invariants",
     r"llama3/elixir-developer-text-and-call$", r"assistant message text not in the prompt"),
    ("gpt-oss template renders only the first of parallel calls (invariant)", "shown-before", r"invariants",
     r"gpt-oss/lasagna-strict-tools$", r"tool call .*: argument .* not in the prompt"),
    ("Gemma 4 template: text beside calls written after them (invariant)", "shown-now", r"invariants",
     r"gemma4/(elixir-developer-text-and-call|lasagna-strict-tools)$",
     r"tool call .* dropped|appears before the turns|<\|turn> opened"),
    ("Command R on llama-server renders tools with the tool_use template", "shown-before", r"llama-server",
     r"command-r/(elixir-developer-text-and-call|elixir-double-encoded-args|lasagna-strict-tools)$",
     r"the reference refused .* but llama-server rendered"),
    # --- second batch (bodies2/): causes no case of the committed matrix showed when the batch was
    # first run; the ten dialects added after it (null-fields .. user-after-tool) show each now,
    # and docs/findings.md names the dialect and the engine code that does it.
    ("vLLM replaces tool-call arguments that are not JSON with {} (the reference keeps the string)", "shown-now",
     r"^vllm$", r"(qwen3|gemma4)/langchain-invalid-args", r"drift at token"),
    ("`name: null` on a message: llama-server (type_error.302) and vLLM (validation) refuse; Transformers drops null keys",
     "shown-now", r"llama-server|vllm", r"/pai-hf-(think-)?null-fields",
     r"type must be string, but is null|validation errors"),
    ("a tool definition without `type`: llama-server refuses it (HTTP 500), vLLM fills in type function", "shown-now",
     r"llama-server", r"/pai-mistral-prefix-call", r"Missing tool type"),
    ("a tool definition without `type`: llama-server refuses it (HTTP 500), vLLM fills in type function", "shown-now",
     r"^vllm$", r"(qwen3|llama3)/pai-mistral-prefix-call", r"drift at token"),
    ("goldens' harmony engine checks the raw tool's type; vLLM's request model fills in function first", "goldens-own",
     r"^harmony$", r"/pai-mistral-prefix-call", r"tool type None is not supported"),
    ("Mistral's `thinking` content part (a list of chunks): llama-server refuses it, vLLM passes the list as text",
     "shown-now", r"llama-server|vllm|harmony", r"/pai-mistral-thinking-chunk",
     r"unsupported content\[\]\.type|drift at token|expected str instance, list found|has no attribute 'split'"
     r"|reference refused \(TypeError: can only concatenate str \(not \"list\"\) to str\) but (harmony|vllm)"),
    ("Gemma 4 template: a tool result with no call before it is dropped (invariant)", "shown-now", r"invariants",
     r"gemma4/(agents-tool-text-parts|roo-tool-then-user)$", r"tool message text not in the prompt"),
    ("DeepSeek-V3 template: a user turn after a tool result leaves the tool-outputs block open (invariant)",
     "shown-now", r"invariants", r"deepseek-v3/roo-tool-then-user$", r"outputs.end.* closed 0"),
    ("minijinja's tojson escapes ' < > & as \\u00XX (HTML-safe); Transformers' tojson writes them as they are",
     "shown-now", r"minijinja", r".", r"\\u0027|\\u003c|\\u003e|\\u0026"),
    ("a multi-line tool description: harmony comments every line, gpt-oss's template only the first", "shown-now",
     r"harmony|vllm", r"gpt-oss/(litellm-empty-enum|pai-ref-sibling)$", r"drift at token"),
    ("a multi-line tool description: mistral-common escapes its newlines, NeMo's template writes them", "shown-now",
     r"mistral-common|vllm", r"mistral-nemo/litellm-empty-enum$", r"drift at token"),
    ("`tools: []`: vLLM refuses the field (HTTP 400), llama-server and mistral-common take it as no tools",
     "shown-now", r"^vllm$", r".", r"`tools` must not be an empty array"),
    ("`tools: []`: NeMo's template writes an empty tool list, mistral-common none (vLLM refuses the field)",
     "shown-now", r"mistral-common", r"mistral-nemo/pai-hf-(think-)?null-fields$", r"drift at token"),
    ("text beside a tool call on Mistral NeMo: mistral-common and vLLM refuse it (content or tool_calls, not both)",
     "shown-now", r"mistral-common|vllm", r"mistral-nemo/mistralcommon-text-and-call$", r"not both"),
    ("vLLM (mistral mode) cuts tool-call ids to their last 9 characters; NeMo's template refuses other ids",
     "shown-now", r"^vllm$", r"mistral-nemo/", r"Tool call IDs should be alphanumeric strings with length 9!\) but vllm"),
    ("Mistral NeMo template drops an assistant's text beside its tool call (invariant)", "shown-now", r"invariants",
     r"mistral-nemo/mistralcommon-text-and-call$", r"assistant message text not in the prompt"),
    ("goldens' invariant checker looks for a call's arguments after its name; NeMo writes them before it", "goldens-own",
     r"invariants", r"mistral-nemo/pai-mistral-prefix-call$", r"argument .* not in the prompt"),
    # --- since the body's own tool_choice reaches vLLM (models.yaml tool_parser): a model served
    # without a tool-call parser (gemma3, phi3.5, command-r) refuses required, named and explicit
    # auto (tools-reduced_tool-choice-required/-named are reviewed ledger entries)
    ("vLLM without a tool-call parser refuses tool_choice required, named or auto", "shown-now", r"^vllm$",
     r"(gemma3|phi3\.5|command-r)/", r"requires --tool-call-parser|requires --enable-auto-tool-choice"),
    # --- the bodies the loader once refused (unwired/): a bare tool name as tool_choice, the
    # legacy function role (dialects tool-choice-bare and function-role)
    ("a bare tool name as tool_choice: llama-server and vLLM refuse it (HTTP 400)", "shown-now",
     r"llama-server|vllm", r"/tgi-tool-choice-string", r"Invalid tool_choice|Invalid value for `tool_choice`"),
    ("a legacy `function` role message: the template drops it (invariant)", "shown-now", r"invariants",
     r"/langchain-function-message", r"function message text not in the prompt"),
    # --- second batch: causes the committed matrix shows, on bodies2/ cases (each checked by hand)
    ("Gemma 4 template: text beside calls written after them (invariant)", "shown-now", r"invariants",
     r"gemma4/(agents-refusal-call|mistralcommon-text-and-call|pai-snowflake-reasoning-details)$",
     r"tool call .* dropped|appears before the turns|<\|turn> opened"),
    ("Llama 3.1 template drops an assistant's text beside its tool call (invariant)", "shown-now", r"invariants",
     r"llama3/(agents-refusal-call|mistralcommon-text-and-call|pai-snowflake-reasoning-details)$",
     r"assistant message text not in the prompt"),
    ("DeepSeek-V3 template: two tool rounds close tool outputs twice (invariant)", "shown-now", r"invariants",
     r"deepseek-v3/pai-dbos-defs-parallel$", r"closed 2"),
    ("gpt-oss template renders only the first of parallel calls (invariant)", "shown-before", r"invariants",
     r"gpt-oss/(langchain-invalid-args|pai-dbos-defs-parallel|vllm-parallel-results)$",
     r"tool call .* dropped|tool call .*: argument .* not in the prompt"),
    ("gpt-oss template drops a second system message (invariant)", "shown-now", r"invariants",
     r"gpt-oss/pai-deepseek-two-systems$", r"system message text not in the prompt"),
    ("tool definitions re-serialized in the server's key order", "shown-before", r"llama-server|vllm",
     r"(qwen3|llama3|mistral-nemo)/pai-(dbos-defs-parallel|deepseek-two-systems|native-output|openrouter-nullable"
     r"|ref-sibling|snowflake-reasoning-details)(--thinking-off)?$", r"drift at token"),
    ("Command R on llama-server renders tools with the tool_use template", "shown-before", r"llama-server",
     r"command-r/(mistralcommon-text-and-call|pai-dbos-defs-parallel|pai-deepseek-two-systems|pai-native-output"
     r"|pai-snowflake-reasoning-details|vllm-parallel-results)$", r"the reference refused .* but llama-server rendered"),
    # --- causes the dialects of this branch show (generator/config/dialects.py, the last twelve)
    ("llama-server refuses to continue a final tool-call turn", "shown-now", r"llama-server", r".",
     r"Cannot continue an assistant message that contains tool calls"),
    ("llama-server refuses two assistant turns at the end", "shown-now", r"llama-server", r".", r"Cannot have 2 or more assistant"),
    ("a parameter typed int is refused (llama.cpp grammar, mistral-common schema check)", "shown-now",
     r"llama-server|mistral-common|vllm", r".", r"unrecognized type int|'int' is not valid"),
    ("json_schema without a name is refused (vLLM, mistral-common)", "shown-now", r"vllm|mistral-common", r".",
     r"json_schema\.name"),
    ("json_object with a schema is refused (mistral-common)", "shown-now", r"mistral-common", r".", r"response_format\.schema"),
    ("a lone system/developer message becomes a user turn (mistral-common)", "shown-now", r"mistral-common|vllm",
     r"mistral-nemo/oainode-", r"."),
    ("text beside a call: harmony's commentary channel, the template's analysis", "shown-now", r"harmony|vllm",
     r"gpt-oss/(aisdk-text-and-calls|ollama-call-and-content|kosong-call-last)$", r"."),
    ("Gemma 4 on vLLM closes the turn after a final tool response", "shown-now", r"vllm",
     r"gemma4/(aisdk-stringify-args|aisdk-thought-signatures|kosong-tool-result)$", r"."),
    ("Gemma 4 template: text beside calls written after them (invariant)", "shown-now", r"invariants",
     r"gemma4/(aisdk-text-and-calls|kosong-call-last|ollama-call-and-content)$", r"tool call .* dropped"),
    ("template drops a final tool call / system-only text (invariant)", "shown-now", r"invariants",
     r"(gemma3|command-r)/((kosong-call-last|ollama-call-(no-content|and-content|reasoning))$|oainode-)",
     r"dropped|not in the prompt"),
    ("Gemma 4 template: two assistant turns in one model turn (invariant)", "shown-now", r"invariants",
     r"gemma4/llamacpp-two-assistants", r"."),
    ("DeepSeek-V3 template: two tool rounds close tool outputs twice (invariant)", "shown-now", r"invariants",
     r"deepseek-v3/aisdk-thought-signatures", r"."),
    ("gpt-oss template renders only the first of parallel calls (invariant)", "shown-before", r"invariants",
     r"gpt-oss/aisdk-text-and-calls", r"."),
    # --- causes the matrix showed before (docs/findings.md, the ledger, goldens/causes)
    ("a reviewed cause (goldens/causes) explains it", "shown-before", r".", r".", r"^cause "),
    ("stale scratch-config invariant entry (not a finding)", "artifact", r"invariants", r".", r"stale models.yaml entry"),
    ("llama-server continues a final assistant message as a prefill", "shown-before", r"llama-server",
     r"llamacpp-prefill-parts", r"."),
    ("phi3.5 llama-server: response_format refused (samplers), stand-in disagrees", "shown-before", r"llama-server",
     r"phi3.5/", r"Failed to initialize samplers"),
    ("Gemma 4 on llama-server thinks by default", "shown-before", r"llama-server", r"gemma4/", r"drift at token [24] "),
    ("Command R on llama-server renders tools with the tool_use template", "shown-before", r"llama-server",
     r"command-r/", r"drift at token [23] "),
    ("llama-server/mistral-common drop a tool's strict", "shown-before", r"llama-server|mistral-common|vllm",
     r"(qwen3|llama3|mistral-nemo)/sglang-(named|required|strict)", r"."),
    ("tool definitions re-serialized in the server's key order", "shown-before", r"llama-server|vllm",
     r"qwen3/oainode-all-params", r"."),
    ("Gemma 4 on vLLM: system content reaches the template as parts", "shown-before", r"vllm", r"gemma4/",
     r"drift at token 4 "),
    ("harmony names a tool result by its tool_call_id only: no id, no name ('functions.')", "shown-now",
     r"harmony|vllm", r"gpt-oss/ollama-result-name$", r"."),
    ("harmony drops the comment line of an empty tool description", "shown-now", r"harmony|vllm",
     r"gpt-oss/llamacpp-required-const$", r"."),
    ("gpt-oss through harmony: its own rendering (developer \\n\\n, encodings, vLLM's tool-result header)", "shown-before", r"harmony|vllm",
     r"gpt-oss/", r"."),
    ("mistral-common rules (parts joined with a blank line, final assistant refused, ThinkChunk)", "shown-before",
     r"mistral-common|vllm", r"mistral-nemo/", r"."),
    ("client-completion renders developer as sent", "shown-before", r"client-completion", r".", r"."),
    ("minijinja/transformers.js hand the body over as sent", "shown-before", r"minijinja|transformers-js", r".", r"."),
    # shown since the dialect choice keeps a case for an invariant finding kind its shape does not
    # show: llama3/tool-result-json-args_call-with-text (renders its base shape's ids)
    ("Llama 3.1 template drops an assistant's text beside its tool call (invariant)", "shown-now", r"invariants",
     r"llama3/(kosong-call-last|ollama-call-and-content)$", r"assistant message text not in the prompt"),
]


def classify(outcome: dict) -> tuple[str, str]:
    engine, case, detail = outcome["engine"], outcome["case"], outcome["detail"] or ""
    for cause, status, e, c, d in RULES:
        if re.search(e, engine) and re.search(c, case) and re.search(d, detail):
            return cause, status
    return "unclassified", "not-shown"


def main() -> None:
    data = json.load(open(sys.argv[1]))
    rows = [o for g in data["groups"] for o in g["outcomes"] if o["status"] not in ("match", "both-refuse")]
    if sys.argv[2:3] == ["--list"]:
        for o in rows:
            if classify(o)[0].startswith(sys.argv[3]):
                print(o["engine"], o["case"], (o["detail"] or "").split("\n")[0][:160])
        return
    by = defaultdict(list)
    for o in rows:
        by[classify(o)].append(o)
    status = Counter()
    for (cause, st), found in by.items():
        status[st] += len(found) if st != "artifact" else 0
    real = {k: v for k, v in by.items() if k[1] != "artifact"}
    print(f"{sum(len(v) for v in real.values())} findings (drift, known, invariant, stand-in; "
          f"{len(rows) - sum(len(v) for v in real.values())} scratch artifacts left out) in {len(real)} causes")
    for st in ("shown-before", "shown-now", "not-shown", "goldens-own"):
        causes = [k for k in real if k[1] == st]
        if causes or st != "goldens-own":
            print(f"  {st}: {sum(len(real[k]) for k in causes)} findings, {len(causes)} causes")
    for (cause, st), found in sorted(real.items(), key=lambda kv: (kv[0][1], -len(kv[1]))):
        engines = ",".join(sorted({o['engine'] for o in found}))
        models = ",".join(sorted({o['case'].split('/')[0] for o in found}))
        print(f"{st:12} {len(found):4}  {cause}  [{engines}; {models}]")
        if st in ("not-shown", "goldens-own"):
            for o in found[:LISTED]:
                print("      ", o["engine"], o["case"], (o["detail"] or "").split("\n")[0][:150])
            if len(found) > LISTED:
                print(f"       ... {len(found) - LISTED} more (--list to see them)")


if __name__ == "__main__":
    main()
