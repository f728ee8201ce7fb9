"""Run under the vLLM venv's Python (which carries vLLM and the `openai` package it pins): print
the request types both define, as JSON, for generator/coverage/schemas.py.

Each type is {key: {"required": bool, "kinds": [...]}}; a kind is "string", "integer", "number",
"boolean", "null", "object", "array:<kinds>", "literal:<json>", or "type:<Name>" for a nested
TypedDict or pydantic model (also listed). Nothing here imports goldens.
"""

import json
import sys
import types
import typing

import typing_extensions as tx


def kinds(annotation, out_types, depth=0):
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if annotation is type(None) or annotation is None:
        return ["null"]
    if origin in (typing.Annotated, tx.Annotated):
        return kinds(args[0], out_types, depth)
    if origin in (typing.Union, types.UnionType):
        return sorted({k for a in args for k in kinds(a, out_types, depth)})
    if origin in (typing.Literal, tx.Literal):
        return sorted(f"literal:{json.dumps(a)}" for a in args)
    if origin in (tx.Required, tx.NotRequired, getattr(tx, "ReadOnly", tx.Required)):
        return kinds(args[0], out_types, depth)
    if origin in (list, tuple, set, typing.Iterable) or (origin is not None and getattr(origin, "__name__", "") in
                                                            ("Iterable", "Sequence", "List")):
        inner = sorted({k for a in args[:1] for k in kinds(a, out_types, depth + 1)}) if args else ["any"]
        return ["array:" + "|".join(inner)]
    if origin is dict or annotation is dict:
        return ["object"]
    if annotation is str:
        return ["string"]
    if annotation is bool:
        return ["boolean"]
    if annotation is int:
        return ["integer"]
    if annotation is float:
        return ["number"]
    if isinstance(annotation, type) and (tx.is_typeddict(annotation) or hasattr(annotation, "model_fields")):
        if depth < 6:
            describe(annotation, out_types, depth + 1)
        return [f"type:{annotation.__name__}"]
    if isinstance(annotation, typing.TypeAliasType if hasattr(typing, "TypeAliasType") else ()):
        return kinds(annotation.__value__, out_types, depth)
    return ["any"]


def describe(cls, out_types, depth=0):
    name = cls.__name__
    if name in out_types:
        return
    out_types[name] = {}
    if tx.is_typeddict(cls):
        hints = tx.get_type_hints(cls, include_extras=True)
        required = getattr(cls, "__required_keys__", set())
        out_types[name] = {key: {"required": key in required or tx.get_origin(hint) is tx.Required,
                                 "kinds": kinds(hint, out_types, depth)}
                           for key, hint in sorted(hints.items())}
    else:  # pydantic
        out_types[name] = {key: {"required": field.is_required(), "kinds": kinds(field.annotation, out_types, depth)}
                           for key, field in sorted(cls.model_fields.items())}


def main():
    import openai
    from openai.types.chat import completion_create_params as params
    from openai.types.chat.chat_completion_message_param import ChatCompletionMessageParam

    out = {"openai": {"version": openai.__version__, "types": {}}, "vllm": {"types": {}}}
    found = out["openai"]["types"]
    kinds(ChatCompletionMessageParam, found)
    describe(params.CompletionCreateParamsBase, found)
    try:
        import vllm
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
        from vllm.renderers import chat_utils

        out["vllm"]["version"] = vllm.__version__
        describe(ChatCompletionRequest, out["vllm"]["types"])
        for name in dir(chat_utils):
            value = getattr(chat_utils, name)
            if isinstance(value, type) and tx.is_typeddict(value) and name.startswith("Custom"):
                describe(value, out["vllm"]["types"])
    except Exception as error:  # noqa: BLE001 - a vLLM that cannot be imported still gives openai's types
        out["vllm"]["error"] = f"{type(error).__name__}: {error}"
    json.dump(out, sys.stdout, indent=1, sort_keys=True)


if __name__ == "__main__":
    main()
