// goldens-parse: llama-server's output side, fed given output ids instead of sampled ones.
//
// Built beside llama-server from the same build tree (generator/engines/llama_server/llama_cpp.py) and linked
// against the same server-context library, so every step below is the server's own function,
// except the per-token loop, which copies server_context_impl::process_token and its callers
// (members of the server's slot loop, not callable on their own).
//
// argv: the server's own flags (-m GGUF --jinja -c 4096 -np 2), parsed as llama-server parses them.
// stdin, one JSON line per case: {"body": chat body, "output": [ids], "chunks": null | [sizes]}.
// stdout, one JSON line each: {"status": HTTP status, "body": the HTTP body} for a whole answer
// or a refused request; {"status": 200, "events": [SSE text sent while each chunk arrived]}.
#include "arg.h"
#include "build-info.h"
#include "common.h"
#include "llama.h"
#include "server-common.h"
#include "server-task.h"
#if __has_include("server-schema.h")
#include "server-schema.h"  // b11434: task params from a schema
#endif
#include <cmath>
#include <cstdio>
#include <iostream>
#include <memory>
#include <type_traits>
#include <unistd.h>

struct slot_text {  // the part of server_slot that process_token reads and writes
    std::string generated_text, stopping_word;
    size_t n_sent_text = 0;
    bool has_next_token = true;
    stop_type stop = STOP_TYPE_NONE;
};

// server_slot::find_stopping_strings (server-context.cpp), verbatim
static size_t find_stopping_strings(slot_text & slot, const task_params & params, const std::string & text,
                                    size_t last_token_size, bool is_full_stop) {
    size_t stop_pos = std::string::npos;
    for (const std::string & word : params.antiprompt) {
        size_t pos;
        if (is_full_stop) {
            const size_t tmp = word.size() + last_token_size;
            pos = text.find(word, text.size() > tmp ? text.size() - tmp : 0);
        } else {
            pos = string_find_partial_stop(text, word);
        }
        if (pos != std::string::npos && (stop_pos == std::string::npos || pos < stop_pos)) {
            if (is_full_stop) {
                slot.stop = STOP_TYPE_WORD;
                slot.stopping_word = word;
                slot.has_next_token = false;
            }
            stop_pos = pos;
        }
    }
    return stop_pos;
}

static json error_body(const std::string & message, error_type type) {  // server.cpp ex_wrapper
    json error = format_error_response(message, type);
    json out = json::object();
    out["status"] = json_value(error, "code", 500);
    json wrapped = json::object();
    wrapped["error"] = error;
    out["body"] = safe_json_to_str(wrapped);
    return out;
}

#if __has_include("server-schema.h")
// server_schema::eval_llama_cmpl_schema took the slot's context size as its third argument when it
// first appeared (b9745..b10108 at least) and no longer does (b11434): call whichever this build has.
template <typename F>
static task_params eval_schema(F eval, const llama_vocab * vocab, const common_params & params_base,
                               const std::vector<llama_logit_bias> & logit_bias_eog, const json & data) {
    if constexpr (std::is_invocable_v<F, const llama_vocab *, const common_params &, int,
                                      const std::vector<llama_logit_bias> &, const json &>) {
        return eval(vocab, params_base, params_base.n_ctx / params_base.n_parallel, logit_bias_eog, data);
    } else {
        return eval(vocab, params_base, logit_bias_eog, data);
    }
}
#endif

static json answer(const llama_vocab * vocab, const common_params & params_base, const server_chat_params & opt,
                   const std::vector<llama_logit_bias> & logit_bias_eog, json line) {
    const bool stream = !line.at("chunks").is_null();
    json body = line.at("body");
    body["stream"] = stream;
    task_params params;
    try {  // server_routes::post_chat_completions, then handle_completions_impl's task params
        std::vector<raw_buffer> files;
        json data = oaicompat_chat_params_parse(body, opt, files);
#if __has_include("server-schema.h")
        params = eval_schema(&server_schema::eval_llama_cmpl_schema, vocab, params_base, logit_bias_eog, data);
#else
        params = server_task::params_from_json_cmpl(vocab, params_base, params_base.n_ctx / params_base.n_parallel,
                                                    logit_bias_eog, data);
#endif
    } catch (const std::invalid_argument & e) {
        return error_body(e.what(), ERROR_TYPE_INVALID_REQUEST);
#if __has_include("json.h")
    } catch (const common_json_error & e) {  // b11434's ex_wrapper: a JSON type error is a 400
        return error_body(e.what(), ERROR_TYPE_INVALID_REQUEST);
#endif
    } catch (const std::exception & e) {
        return error_body(e.what(), ERROR_TYPE_SERVER);
    }
    params.res_type = TASK_RESPONSE_TYPE_OAI_CHAT;
    params.oaicompat_cmpl_id = "chatcmpl-goldens";
    params.oaicompat_model = "goldens";
    task_result_state state(params.chat_parser_params);  // server_response_reader's per-task state

    std::vector<int> ends;  // the id count at the end of each chunk
    for (const auto & n : line.at("chunks").is_null() ? json::array() : line.at("chunks")) {
        ends.push_back((ends.empty() ? 0 : ends.back()) + n.get<int>());
    }
    json events = json::array();
    std::string sent;  // the SSE text of the current chunk
    bool first = true, failed = false;
    // each result as server_response_reader::next updates it and the stream's next() sends it
    auto send = [&](server_task_result & res) {
        try {
            res.update(state);
            sent += format_oai_sse(res.to_json());
        } catch (const std::exception & e) {
            if (first) throw;  // handle_completions_impl reads the first result outside its try
            sent += format_oai_sse(json::object({{"error", format_error_response(e.what(), ERROR_TYPE_SERVER)}}));
            failed = true;  // the stream ends on an error
        }
        first = false;
    };

    slot_text slot;
    std::vector<llama_token> ids;
    for (const auto & id : line.at("output")) ids.push_back(id.get<int>());
    try {
        for (size_t i = 0; i < ids.size() && slot.has_next_token && !failed; i++) {
            // server_context_impl::update_slots: the sampled token's piece, special text only
            // for --special or the request's preserved tokens (accept_special_token)
            const llama_token tok = ids[i];
            const bool special = params_base.special || params.sampling.preserved_tokens.count(tok) > 0;
            std::string token_str = common_token_to_piece(vocab, tok, special);
            // server_context_impl::process_token, the text path
            slot.generated_text += token_str;
            slot.has_next_token = true;
            if (validate_utf8(slot.generated_text) == slot.generated_text.size()) {
                size_t pos = std::min(slot.n_sent_text, slot.generated_text.size());
                const std::string str_test = slot.generated_text.substr(pos);
                bool send_text = true;
                size_t stop_pos = find_stopping_strings(slot, params, str_test, token_str.size(), true);
                if (stop_pos != std::string::npos) {
                    slot.generated_text.erase(slot.generated_text.begin() + pos + stop_pos, slot.generated_text.end());
                    pos = std::min(slot.n_sent_text, slot.generated_text.size());
                } else if (slot.has_next_token && !llama_vocab_is_eog(vocab, tok)) {
                    stop_pos = find_stopping_strings(slot, params, str_test, token_str.size(), false);
                    send_text = stop_pos == std::string::npos;
                }
                std::string text_to_send;
                if (send_text) {
                    text_to_send = slot.generated_text.substr(pos);
                    slot.n_sent_text += text_to_send.size();
                }
                if (stream) {  // send_partial_response
                    auto res = std::make_unique<server_task_result_cmpl_partial>();
                    res->content = text_to_send;
                    res->tokens.assign(1, tok);
                    res->n_decoded = (int32_t) i + 1;
                    res->res_type = params.res_type;
                    res->oaicompat_cmpl_id = params.oaicompat_cmpl_id;
                    res->oaicompat_model = params.oaicompat_model;
                    send(*res);
                }
            }
            if (slot.has_next_token && i + 1 == ids.size()) {  // has_budget(): n_predict is the output's length
                slot.stop = STOP_TYPE_LIMIT;
                slot.has_next_token = false;
            }
            if (llama_vocab_is_eog(vocab, tok)) {
                slot.stop = STOP_TYPE_EOS;
                slot.has_next_token = false;
            }
            if (!slot.has_next_token && !failed) {  // send_final_response
                auto res = std::make_unique<server_task_result_cmpl_final>();
                res->content = stream ? "" : slot.generated_text;  // streamed text went with the partials
                res->stream = stream;
                res->n_decoded = (int32_t) i + 1;
                res->stopping_word = slot.stopping_word;
                res->stop = slot.stop;
                res->res_type = params.res_type;
                res->oaicompat_cmpl_id = params.oaicompat_cmpl_id;
                res->oaicompat_model = params.oaicompat_model;
                if (!stream) {  // handle_completions_impl: one result, its JSON as the body
                    res->update(state);
                    json out = json::object();
                    out["status"] = 200;
                    out["body"] = safe_json_to_str(res->to_json());
                    return out;
                }
                send(*res);
                if (!failed) sent += "data: [DONE]\n\n";
            }
            for (int end : ends) if ((size_t) end == i + 1) { events.push_back(sent); sent.clear(); }
        }
    } catch (const std::exception & e) {  // thrown by a whole answer's parse, or the first streamed one
        return error_body(e.what(), ERROR_TYPE_SERVER);
    }
    while (events.size() < ends.size()) { events.push_back(sent); sent.clear(); }  // ids after the stop
    json out = json::object();
    out["status"] = 200;
    out["events"] = events;
    return out;
}

int main(int argc, char ** argv) {
    FILE * out = fdopen(dup(STDOUT_FILENO), "w");  // answers only: every log line goes to stderr
    dup2(STDERR_FILENO, STDOUT_FILENO);
    common_params params_base;
    if (!common_params_parse(argc, argv, params_base, LLAMA_EXAMPLE_SERVER)) return 2;
    llama_backend_init();
    llama_model_params mparams = common_model_params_to_llama(params_base);
    mparams.vocab_only = true;  // the tokens' pieces and the template need no weights
    llama_model * model = llama_model_load_from_file(params_base.model.path.c_str(), mparams);
    if (model == nullptr) return 2;
    const llama_vocab * vocab = llama_model_get_vocab(model);
    std::vector<llama_logit_bias> logit_bias_eog;  // common_init_from_params
    for (llama_token i = 0; i < llama_vocab_n_tokens(vocab); i++) {
        if (llama_vocab_is_eog(vocab, i)) logit_bias_eog.push_back({i, -INFINITY});
    }
    // server_context_impl::load_model: the chat params every request is parsed with
    server_chat_params opt{};
    opt.tmpls = common_chat_templates_init(model, params_base.chat_template);
    opt.use_jinja = params_base.use_jinja;
    opt.prefill_assistant = params_base.prefill_assistant;
    opt.reasoning_format = params_base.reasoning_format;
    opt.chat_template_kwargs = params_base.default_template_kwargs;
    opt.enable_thinking = params_base.enable_reasoning != 0 && params_base.use_jinja
                          && common_chat_templates_support_enable_thinking(opt.tmpls.get());
    opt.reasoning_budget = params_base.sampling.reasoning_budget_tokens;
    opt.reasoning_budget_message = params_base.sampling.reasoning_budget_message;
    opt.media_path = params_base.media_path;
    opt.force_pure_content = params_base.force_pure_content_parser;
    json ready = json::object();
    ready["build"] = llama_build_number();
    ready["build_info"] = std::string(llama_build_info());
    fprintf(out, "%s\n", ready.dump().c_str());
    fflush(out);
    for (std::string text; std::getline(std::cin, text);) {
        json reply;
        try {
            reply = answer(vocab, params_base, opt, logit_bias_eog, json::parse(text));
        } catch (const std::exception & e) {  // a malformed line from goldens itself
            reply = json::object();
            reply["error"] = std::string(e.what());
        }
        fprintf(out, "%s\n", reply.dump().c_str());
        fflush(out);
    }
    llama_model_free(model);
    return 0;
}
