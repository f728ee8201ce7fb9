"""llama-server, and the client that posts its own render to llama-server's /completion.

engine.py: the engines (LlamaServerEngine, ClientCompletionEngine) and their version line;
llama_cpp.py: llama.cpp built per build number and the managed llama-server process;
tiny_gguf.py, tiny_gguf_writer.py, tiny_mmproj.py: the weightless GGUF and projector it serves;
parse_harness.py and llama_parse/: the output side's harness, built beside the server;
coverage.py, cpp_reach.py, gcov_launcher.py: its request layer under gcov (`goldens coverage
--engine llama-server`). The registry (config/engine_registry.py) names what the pool loads."""
