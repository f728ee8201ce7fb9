"""llama-server's request layer as a reachable set (generator/engines/llama_server/cpp_reach.py): gcov's
function names cleaned, calls read from each function's own lines, the closure seeded from the
route handler lambdas and stopped past the template. The source and the function list are
written here as gcov reports them for such a file."""

from __future__ import annotations

from generator.engines.llama_server import cpp_reach

SOURCE = """\
static json parse_body(const json & body) {
    json out = json::parse(body.dump());
    return common_chat_parse(out);
}
json common_chat_parse(const json & x) {
    return helper::normalize(x);
}
json helper::normalize(const json & x) {
    return x;
}
json unused_thing(const json & x) {
    return x;
}
void server_routes::init_routes() {
    this->post_apply_template = [this](const server_http_req & req) {
        auto data = parse_body(req.body);
        return data;
    };
    this->post_infill = [this](const server_http_req & req) {
        return unused_thing(req.body);
    };
    this->post_chat_completions = [this](const server_http_req & req) {
        auto data = parse_body(req.body);
        return handle_completions_impl(data);
    };
}
void server_routes::handle_completions_impl(const json & data) {
    run_inference(data);
}
void run_inference(const json & data) {
}
"""


def fn(name: str, first: int, last: int) -> cpp_reach.Function:
    return cpp_reach.Function("tools/server/x.cpp", cpp_reach.clean_name(name), first, last)


FUNCTIONS = [
    fn("parse_body(nlohmann::json_abi_v3_11_3::basic_json<> const&)", 1, 4),
    fn("common_chat_parse(nlohmann::json_abi_v3_11_3::basic_json<> const&)", 5, 7),
    fn("helper::normalize(nlohmann::json_abi_v3_11_3::basic_json<> const&)", 8, 10),
    fn("unused_thing(nlohmann::json_abi_v3_11_3::basic_json<> const&)", 11, 13),
    fn("server_routes::init_routes()", 14, 26),
    fn("server_routes::init_routes()::{lambda(server_http_req const&)#1}::operator()(server_http_req const&) const", 15, 18),
    fn("server_routes::init_routes()::{lambda(server_http_req const&)#2}::operator()(server_http_req const&) const", 19, 21),
    fn("server_routes::init_routes()::{lambda(server_http_req const&)#3}::operator()(server_http_req const&) const", 22, 25),
    fn("server_routes::handle_completions_impl(nlohmann::json_abi_v3_11_3::basic_json<> const&)", 27, 29),
    fn("run_inference(nlohmann::json_abi_v3_11_3::basic_json<> const&)", 30, 31),
]
SOURCES = {"tools/server/x.cpp": SOURCE.splitlines()}
MARKS = (("tools/server/x.cpp", "this->post_apply_template = "), ("tools/server/x.cpp", "this->post_chat_completions = "))


def test_gcov_names_lose_their_parameter_lists_and_keep_lambdas_apart():
    assert FUNCTIONS[5].name == "server_routes::init_routes::{lambda#1}::operator()"
    assert FUNCTIONS[2].name == "helper::normalize" and FUNCTIONS[2].base == "normalize"
    assert FUNCTIONS[2].scope == "helper"


def test_the_handlers_reach_their_callees_and_stop_past_the_template():
    found = cpp_reach.reachable(FUNCTIONS, SOURCES, MARKS, stops=("server_routes::handle_completions_impl",))
    names = {key.split(":", 1)[1] for key in found}
    assert names == {"server_routes::init_routes::{lambda#1}::operator()",
                     "server_routes::init_routes::{lambda#3}::operator()",
                     "parse_body", "common_chat_parse", "helper::normalize"}
    # the infill route's lambda and what only it calls, the route table itself, inference: out


def test_a_qualified_call_outside_the_layer_reaches_nothing():
    # json::parse is nlohmann's: `json` is no scope of the layer, so no `parse` of it is reached
    assert ("json", "parse") in cpp_reach.calls(SOURCE)
    edges = cpp_reach.graph(FUNCTIONS, SOURCES)
    assert edges["tools/server/x.cpp:parse_body"] == {"tools/server/x.cpp:common_chat_parse"}


def test_abi_tags_and_template_arguments_leave_the_name_a_call_spells():
    name = cpp_reach.clean_name("common_chat_template_direct_apply_impl[abi:cxx11](common_chat_template const&, "
                                "std::function<nlohmann::basic_json<> ()> const&)")
    assert name == "common_chat_template_direct_apply_impl"
    assert cpp_reach.Function("x.cpp", cpp_reach.clean_name(
        "jinja::caps_try_execute(jinja::program&, std::function<common_json ()> const&)"), 1, 2).base == "caps_try_execute"
    templated = cpp_reach.Function("x.cpp", cpp_reach.clean_name(
        "std::__cxx11::basic_string<char> autoparser::mode_to_str<autoparser::call_id_position>(autoparser::call_id_position)"), 1, 2)
    assert templated.base == "mode_to_str" and templated.scope == "autoparser"
