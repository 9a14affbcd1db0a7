"""Structured output: the JSON schema a request's reply must follow, checked before the
model gets it as a guide (``guide.py`` holds the model's side of the contract).

``response_format`` ``json_schema`` gives its schema, ``json_object`` any JSON object;
a forced tool (a named ``tool_choice``, or ``required``) gives its ``parameters``, which
take precedence. A model that can be guided (:attr:`Entry.guided`) gets the schema; a
model that cannot answers 400 for ``response_format``, while a forced tool goes
unguided there, as in Triton. A schema xgrammar cannot follow answers 400.
"""

from __future__ import annotations

import asyncio
import json

from despina_frontend_openai.catalog import Entry
from despina_frontend_openai.errors import OpenAIError
from despina_frontend_openai.schema import FunctionDef, _Sampling

#: The schema of ``json_object``.
ANY_OBJECT = '{"type": "object"}'


def schema_of(body: _Sampling, tool: FunctionDef | None) -> tuple[str, str] | None:
    """(the JSON schema as text, the request field it comes from), or None when the
    reply is free text."""
    if tool is not None:
        return json.dumps(tool.parameters or {"type": "object"}), "tools"
    form = body.response_format
    if form is None or form.type == "text":
        return None
    if form.type == "json_object":
        return ANY_OBJECT, "response_format"
    if form.json_schema is None:
        raise OpenAIError(
            "response_format.json_schema is required when type is json_schema",
            param="response_format",
        )
    schema = form.json_schema.schema_
    return (ANY_OBJECT if schema is None else json.dumps(schema)), "response_format"


async def guided_schema(entry: Entry, body: _Sampling, tool: FunctionDef | None) -> str | None:
    """The JSON schema the model is guided by for this request, or None (see the
    module's rules); OpenAIError 400 for a model that cannot be guided, a schema
    xgrammar cannot follow, or a server without xgrammar."""
    found = schema_of(body, tool)
    if found is None:
        return None
    schema, param = found
    if not entry.guided:
        if tool is not None:
            return None
        raise OpenAIError(
            f"model '{entry.model.name}' does not support guided decoding, which "
            "response_format needs: it takes neither guided_decoding_guide_type and "
            "guided_decoding_guide nor sampling_parameters",
            param="response_format",
        )
    try:
        from despina_frontend_openai.guide import grammar
    except ImportError:
        raise OpenAIError(
            "structured output needs xgrammar on the server: "
            "pip install 'despina-frontend-openai[guided]'",
            param=param,
        ) from None
    try:
        await asyncio.to_thread(grammar, "json_schema", schema)
    except ValueError as exc:
        raise OpenAIError(str(exc), param=param) from None
    return schema
