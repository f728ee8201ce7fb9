"""Writes bench/outside/bodies/*.json and provenance.json's first-batch sections (`wired`,
`not_wired`): request bodies found in other projects' tests (none written here), each with where it
was found. Run once; the files are committed. The second batch (bodies2/, provenance.json `bodies2`)
was written from the files its provenance names and is not rewritten here."""
import json
from pathlib import Path

HERE = Path(__file__).parent
BODIES, PROV = {}, {}

def body(name, repo, path, commit, note, **b):
    BODIES[name] = b
    PROV[name] = {"repo": repo, "path": path, "commit": commit, "where": note}

# --- SGLang test/srt/openai_server/function_call/test_openai_function_calling.py
SG = ("sgl-project/sglang", "test/srt/openai_server/function_call/test_openai_function_calling.py",
      "0b396b305e6949e34d3973536f26695671274b86")
SG_SYSTEM = (
    "You are a helpful assistant with tool calling capabilities. "
    "Only reply with a tool call if the function exists in the library provided by the user. "
    "If it doesn't exist, just reply directly in natural language. "
    "When you receive a tool call response, use the output to format an answer to the original user question. "
    "You have access to the following functions. "
    "To call a function, please respond with JSON for a function call. "
    'Respond in the format {"name": function name, "parameters": dictionary of argument name and its value}. '
    "Do not use variables.\n\n")
ADD_INT = {"type": "function", "function": {"name": "add", "description": "Compute the sum of two numbers",
    "parameters": {"type": "object", "properties": {"a": {"type": "int", "description": "A number"},
                   "b": {"type": "int", "description": "A number"}}, "required": ["a", "b"]}}}
ADD_STRICT = {"type": "function", "function": {"name": "add", "description": "Compute the sum of two integers",
    "parameters": {"type": "object", "properties": {"a": {"type": "integer", "description": "First integer"},
                   "b": {"type": "integer", "description": "Second integer"}}, "required": ["a", "b"]},
    "strict": True}}
SUB_STRICT = {"type": "function", "function": {"name": "sub", "description": "Compute the difference of two integers",
    "parameters": {"type": "object", "properties": {"int_a": {"type": "integer", "description": "First integer"},
                   "int_b": {"type": "integer", "description": "Second integer"}}, "required": ["int_a", "int_b"]},
    "strict": True}}
SG_WEATHER = {"type": "function", "function": {"name": "get_weather",
    "description": "use this to get latest weather information for a city given its name",
    "parameters": {"type": "object", "properties": {"city": {"type": "string",
                   "description": "name of the city to get weather for"}}, "required": ["city"]}}}
CUR_WEATHER = {"type": "function", "function": {"name": "get_current_weather",
    "description": "Get the current weather in a given location",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "description": "The city to find the weather for"},
        "unit": {"type": "string", "description": "Weather unit (celsius or fahrenheit)", "enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"]}}}
body("sglang-add-int", *SG, "test_function_calling_format: messages and tools (JSON-schema type 'int')",
     messages=[{"role": "system", "content": SG_SYSTEM}, {"role": "user", "content": "Compute (3+5)"}],
     tools=[ADD_INT])
body("sglang-strict", *SG, "test_function_calling_streaming_args_parsing: a tool with strict",
     messages=[{"role": "system", "content": SG_SYSTEM}, {"role": "user", "content": "Please sum 5 and 7, just call the function."}],
     tools=[ADD_STRICT])
body("sglang-required", *SG, "test_function_call_required: tool_choice required",
     messages=[{"role": "user", "content": "What is the capital of France?"}], tools=[SUB_STRICT, SG_WEATHER],
     tool_choice="required")
body("sglang-named", *SG, "test_function_call_specific: tool_choice naming get_weather",
     messages=[{"role": "user", "content": "What is the capital of France?"}], tools=[SUB_STRICT, SG_WEATHER],
     tool_choice={"type": "function", "function": {"name": "get_weather"}})
body("sglang-none", *SG, "test_function_calling_streaming_no_tool_call: tool_choice none",
     messages=[{"role": "user", "content": "Who are you?"}], tools=[CUR_WEATHER], tool_choice="none")
body("sglang-pythonic", *SG, "TestOpenAIPythonicFunctionCalling: PYTHONIC_MESSAGES and PYTHONIC_TOOLS",
     messages=[{"role": "system", "content": (
         "You are a travel assistant. "
         "When asked to call functions, ALWAYS respond ONLY with a python list of function calls, "
         "using this format: [func_name1(param1=value1, param2=value2), func_name2(param=value)]. "
         "Do NOT use JSON, do NOT use variables, do NOT use any other format. "
         "Here is an example:\n"
         '[get_weather(location="Paris"), get_tourist_attractions(city="Paris")]')},
         {"role": "user", "content": (
         "I'm planning a trip to Tokyo next week. What's the weather like and what are some top tourist attractions? "
         "Propose parallel tool calls at once, using the python list of function calls format as shown above.")}],
     tools=[{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather for a given location.",
             "parameters": {"type": "object", "properties": {"location": {"type": "string", "description": "The name of the city or location."}},
                            "required": ["location"]}}},
            {"type": "function", "function": {"name": "get_tourist_attractions", "description": "Get a list of top tourist attractions for a given city.",
             "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "The name of the city to find attractions for."}},
                            "required": ["city"]}}}])

# --- openai-node tests/api-resources/chat/completions/completions.test.ts (Stainless-generated)
ON = ("openai/openai-node", "tests/api-resources/chat/completions/completions.test.ts",
      "2b45d8006255d2742e1d3eb8391ae9b8d95f4e10")
body("oainode-required-params", *ON, "create: only required params",
     messages=[{"content": "string", "role": "developer"}], model="gpt-5.4")
body("oainode-all-params", *ON, "create: required and optional params (the chat fields; sampling and "
     "OpenAI-only fields kept as found, the loader drops them)",
     messages=[{"content": "string", "role": "developer", "name": "name"}], model="gpt-5.4",
     function_call="none", functions=[{"name": "name", "description": "description", "parameters": {"foo": "bar"}}],
     parallel_tool_calls=True, response_format={"type": "text"}, tool_choice="none",
     tools=[{"function": {"name": "name", "description": "description", "parameters": {"foo": "bar"}, "strict": True},
             "type": "function"}])

# --- Vercel AI SDK packages/openai-compatible/src/chat/convert-to-openai-compatible-chat-messages.test.ts
VA = ("vercel/ai", "packages/openai-compatible/src/chat/convert-to-openai-compatible-chat-messages.test.ts",
      "028158f5e8b235efc14194390b80f0dea86504c1")
body("aisdk-stringify-args", *VA, "tool calls: should stringify arguments to tool calls (the expected messages)",
     messages=[{"role": "assistant", "content": "", "tool_calls": [{"type": "function", "id": "quux",
                "function": {"name": "thwomp", "arguments": json.dumps({"foo": "bar123"}, separators=(",", ":"))}}]},
               {"role": "tool", "content": json.dumps({"oof": "321rab"}, separators=(",", ":")), "tool_call_id": "quux"}])
body("aisdk-thought-signatures", *VA, "Gemini thought signatures: sequential tool calls (the converter's input "
     "prompt as the expected messages: a single text part flattened to a string, extra_content on each call)",
     messages=[{"role": "user", "content": "Check flight status for AA100 and book a taxi 2 hours before if delayed."},
               {"role": "assistant", "content": "", "tool_calls": [{"id": "function-call-1", "type": "function",
                "function": {"name": "check_flight", "arguments": json.dumps({"flight": "AA100"}, separators=(",", ":"))},
                "extra_content": {"google": {"thought_signature": "<Signature A>"}}}]},
               {"role": "tool", "tool_call_id": "function-call-1",
                "content": json.dumps({"status": "delayed", "departure_time": "12 PM"}, separators=(",", ":"))},
               {"role": "assistant", "content": "", "tool_calls": [{"id": "function-call-2", "type": "function",
                "function": {"name": "book_taxi", "arguments": json.dumps({"time": "10 AM"}, separators=(",", ":"))},
                "extra_content": {"google": {"thought_signature": "<Signature B>"}}}]},
               {"role": "tool", "tool_call_id": "function-call-2",
                "content": json.dumps({"booking_status": "success"}, separators=(",", ":"))}])
body("aisdk-text-and-calls", *VA, "an assistant message with text plus multiple tool calls (expected messages)",
     messages=[{"role": "assistant", "content": "Checking that now...Almost there...", "tool_calls": [
         {"id": "call1", "type": "function", "function": {"name": "searchTool", "arguments": json.dumps({"query": "Weather"}, separators=(",", ":"))},
          "function_call_reason": "user request"},
         {"id": "call2", "type": "function", "function": {"name": "mapsTool", "arguments": json.dumps({"location": "Paris"}, separators=(",", ":"))}}]}])
body("aisdk-two-text-parts", *VA, "a user message with multiple text parts (flattening disabled)",
     messages=[{"role": "user", "content": [{"type": "text", "text": "Part 1"}, {"type": "text", "text": "Part 2"}]}])

# --- Ollama middleware/openai_test.go TestChatMiddleware (the JSON bodies as written)
OL = ("ollama/ollama", "middleware/openai_test.go", "045cf2773260fda7a3f592b07e22463b2c45464e")
PARIS_CALL = {"id": "id", "type": "function", "function": {"name": "get_current_weather",
              "arguments": "{\"location\": \"Paris, France\", \"format\": \"celsius\"}"}}
Q = {"role": "user", "content": "What's the weather like in Paris Today?"}
body("ollama-json-object", *OL, "chat handler with options: response_format json_object",
     model="test-model", messages=[{"role": "user", "content": "Hello"}], stream=True, max_tokens=999, seed=123,
     stop=["\n", "stop"], temperature=3.0, frequency_penalty=4.0, presence_penalty=5.0, top_p=6.0,
     response_format={"type": "json_object"})
body("ollama-call-no-content", *OL, "chat handler with tools: an assistant tool call with no content key, last",
     model="test-model", messages=[Q, {"role": "assistant", "tool_calls": [PARIS_CALL]}])
body("ollama-call-and-content", *OL, "chat handler with tools and content",
     model="test-model", messages=[Q, {"role": "assistant", "content": "Let's see what the weather is like in Paris",
                                       "tool_calls": [PARIS_CALL]}])
body("ollama-call-reasoning", *OL, "chat handler with tools and thinking content: `reasoning` beside a tool call",
     model="test-model", messages=[Q, {"role": "assistant", "reasoning": "Let's see what the weather is like in Paris",
                                       "tool_calls": [PARIS_CALL]}])
body("ollama-result-call-id", *OL, "tool response with call ID (no name)",
     model="test-model", messages=[Q, {"role": "assistant", "tool_calls": [{**PARIS_CALL, "id": "id_abc"}]},
                                   {"role": "tool", "tool_call_id": "id_abc", "content": "The weather in Paris is 20 degrees Celsius"}])
body("ollama-result-name", *OL, "tool response with name (no tool_call_id)",
     model="test-model", messages=[Q, {"role": "assistant", "tool_calls": [PARIS_CALL]},
                                   {"role": "tool", "name": "get_current_weather", "content": "The weather in Paris is 20 degrees Celsius"}])
body("ollama-tools-required-first", *OL, "chat handler with streaming tools: `required` before `properties`",
     model="test-model", messages=[{"role": "user", "content": "What's the weather like in Paris?"}], stream=True,
     tools=[{"type": "function", "function": {"name": "get_weather", "description": "Get the current weather",
             "parameters": {"type": "object", "required": ["location"], "properties": {
                 "location": {"type": "string", "description": "The city and state"},
                 "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}}}}}])

# --- llama.cpp tools/server/tests/unit
LC_TOOL = ("ggml-org/llama.cpp", "tools/server/tests/unit/test_tool_call.py", "17d79a1b76a6601c2f1775ddf52757f93b65968a")
LC_CHAT = ("ggml-org/llama.cpp", "tools/server/tests/unit/test_chat_completion.py", "0ce03597e8c11b6cbc746c3915e0e0a9982d31b7")
CODING = [{"role": "system", "content": "You are a coding assistant."}, {"role": "user", "content": "Write an example"}]
body("llamacpp-required-const", *LC_TOOL, "do_test_completion_with_required_tool_tiny with TEST_TOOL "
     "(empty description, `const`), stream false",
     max_tokens=512, messages=CODING, tool_choice="required",
     tools=[{"type": "function", "function": {"name": "test", "description": "", "parameters": {
         "type": "object", "properties": {"success": {"type": "boolean", "const": True}}, "required": ["success"]}}}],
     parallel_tool_calls=False)
body("llamacpp-rf-json-object-schema", *LC_CHAT, "test_completion_with_response_format: json_object with a schema",
     max_tokens=6, messages=CODING, response_format={"type": "json_object", "schema": {"const": "42"}})
body("llamacpp-rf-schema-no-name", *LC_CHAT, "test_completion_with_response_format: json_schema without a name",
     max_tokens=10, messages=CODING, response_format={"type": "json_schema", "json_schema": {"schema": {"const": "foooooo"}}})
body("llamacpp-prefill-parts", *LC_CHAT, "test_chat_template_assistant_prefill: the prefill as two text parts",
     max_tokens=8, messages=[{"role": "system", "content": "Book"}, {"role": "user", "content": "What is the best book"},
                             {"role": "assistant", "content": [{"type": "text", "text": "Wh"}, {"type": "text", "text": "ill"}]}])
body("llamacpp-two-assistants", *LC_CHAT, "test_invalid_chat_completion_req: two assistant turns in a row (llama.cpp expects 400/500)",
     messages=[{"role": "user", "content": "test"}, {"role": "assistant", "content": "test"}, {"role": "assistant", "content": "test"}])

# --- TGI integration-tests/models/test_tools_llama.py
TG = ("huggingface/text-generation-inference", "integration-tests/models/test_tools_llama.py",
      "04b409e7ae00c1b9c8ff1fb9349ea387b707e10b")
TGI_TOOLS = [
    {"type": "function", "function": {"name": "get_current_weather", "description": "Get the current weather",
     "parameters": {"type": "object", "properties": {
         "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
         "format": {"type": "string", "enum": ["celsius", "fahrenheit"],
                    "description": "The temperature unit to use. Infer this from the users location."}},
         "required": ["location", "format"], "additionalProperties": False}}},
    {"type": "function", "function": {"name": "get_n_day_weather_forecast", "description": "Get an N-day weather forecast",
     "parameters": {"type": "object", "properties": {
         "location": {"type": "string", "description": "The city and state, e.g. San Francisco, CA"},
         "format": {"type": "string", "enum": ["celsius", "fahrenheit"],
                    "description": "The temperature unit to use. Infer this from the users location."},
         "num_days": {"type": "integer", "description": "The number of days to forecast"}},
         "required": ["location", "format", "num_days"], "additionalProperties": False}}}]
TGI_MSGS = [{"role": "system", "content": "Youre a helpful assistant! Answer the users question best you can."},
            {"role": "user", "content": "What is the weather like in Brooklyn, New York?"}]
body("tgi-tools", *TG, "test_flash_llama_grammar_tools", max_tokens=100, seed=1, tools=TGI_TOOLS, temperature=0.0,
     messages=TGI_MSGS)
body("tgi-tools-auto-no-system", *TG, "test_flash_llama_grammar_tools_insufficient_information", max_tokens=100,
     seed=24, tools=TGI_TOOLS, tool_choice="auto", messages=[{"role": "user", "content": "Tell me a story about 3 sea creatures"}],
     stream=False)

# --- llama-stack tests/integration/test_cases/inference/chat_completion.json ("ttft": OpenAI-shaped messages)
LS = ("meta-llama/llama-stack", "tests/integration/test_cases/inference/chat_completion.json",
      "0412ecbb4728571855a73fc4ce173e86d08b1f87")
ttft = {"messages": [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "Can you write me a novel?"},
    {"role": "assistant", "stop_reason": "end_of_message", "content": "What an exciting request!"},
    {"role": "user", "content": "But do you have suggestions on a plot?"},
    {"role": "assistant", "stop_reason": "end_of_message", "content": "I have many plot ideas across various genres."},
    {"role": "user", "content": "Cool, for AI uprising, anything bad can happen? Please state it in 100 words."}]}
body("llamastack-stop-reason", *LS, "the `ttft` case: assistant turns carry `stop_reason` (the two long assistant "
     "texts cut to their first sentence; nothing else changed)", **ttft)

# --- MoonshotAI/kosong tests/api_snapshot_tests/test_openai_legacy.py (request bodies captured by respx, inline snapshots)
KS = ("MoonshotAI/kosong", "tests/api_snapshot_tests/test_openai_legacy.py", "a9159c1043481210125bb72ffbe3805821699770")
ADD = {"type": "function", "function": {"name": "add", "description": "Add two integers.", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer", "description": "First number"},
                                     "b": {"type": "integer", "description": "Second number"}}, "required": ["a", "b"]}}}
CALL = {"id": "call_abc123", "type": "function", "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}
body("kosong-tool-definition", *KS, "test_tool_definition", messages=[{"role": "user", "content": "Add 2 and 3"}], tools=[ADD])
body("kosong-call-last", *KS, "test_assistant_message_with_tool_call: the conversation ends in the call",
     messages=[{"role": "user", "content": "Add 2 and 3"},
               {"role": "assistant", "content": "I'll add those numbers for you.", "tool_calls": [CALL]}])
body("kosong-tool-result", *KS, "test_tool_result_message",
     messages=[{"role": "user", "content": "Add 2 and 3"}, {"role": "assistant", "content": "", "tool_calls": [CALL]},
               {"role": "tool", "content": "5", "tool_call_id": "call_abc123"}])
body("kosong-reasoning-history", *KS, "test_reasoning_content_with_custom_key (reasoning_content in history)",
     messages=[{"role": "user", "content": "What is 2+2?"},
               {"role": "assistant", "content": "The answer is 4.", "reasoning_content": "Let me think step by step..."},
               {"role": "user", "content": "Thanks!"}])

# Found, but refused by goldens' own request loader (kept in provenance, not wired):
NOT_WIRED = {
    "llamacpp-tools-null": {"repo": LC_TOOL[0], "path": LC_TOOL[1], "commit": LC_TOOL[2],
        "where": "do_test_completion_without_tool_call with tools=[] : \"tools\": null, \"tool_choice\": null",
        "body": {"messages": [{"role": "system", "content": "You are a coding assistant."},
                              {"role": "user", "content": "say hello world with python"}], "tools": None, "tool_choice": None},
        "refused": "tools must be a list; tool_choice must be none/auto/required/object"},
    "tgi-tool-choice-string": {"repo": TG[0], "path": TG[1], "commit": TG[2],
        "where": "test_flash_llama_grammar_tools_choice: tool_choice as a bare function name",
        "body": {"messages": TGI_MSGS, "tools": TGI_TOOLS, "tool_choice": "get_current_weather"},
        "refused": "tool_choice must be none/auto/required/object"},
}

out = HERE / "bodies"
out.mkdir(exist_ok=True)
for name, b in BODIES.items():
    (out / f"{name}.json").write_text(json.dumps(b, indent=2, ensure_ascii=False) + "\n")
# the first batch's sections; any other section (the second batch, `bodies2`) is kept as it stands
prov = HERE / "provenance.json"
sections = json.loads(prov.read_text()) if prov.exists() else {}
sections.update({"wired": PROV, "not_wired": NOT_WIRED})
prov.write_text(json.dumps(sections, indent=2, ensure_ascii=False) + "\n")
print(len(BODIES), "bodies,", len(NOT_WIRED), "not wired")
