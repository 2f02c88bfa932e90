"""The file formats' reference: one page per JSON Schema, as `kcatalog schema` generates them from the pydantic models
(and commits them under schemas/), each definition a table of its fields."""

from __future__ import annotations

import json
from typing import Any

from kcatalog.validate.jsonschema import render_schemas

from .project import Project

CONSTRAINTS = {
    "pattern": "matches `{}`",
    "minItems": "at least {} items",
    "maxItems": "at most {} items",
    "minProperties": "at least {} entries",
    "minimum": "≥ {}",
    "exclusiveMinimum": "> {}",
    "exclusiveMaximum": "< {}",
}


def _cell(text: str) -> str:
    """Text for a table cell: one line, pipes escaped."""
    return " ".join(text.split()).replace("|", "\\|")


def _anchor(name: str) -> str:
    return name.lower()


def kind(node: dict[str, Any]) -> str:
    """The type of a schema node, in words, definitions linked."""
    if "$ref" in node:
        name = node["$ref"].rsplit("/", 1)[-1]
        return f"[{name}](#{_anchor(name)})"
    if "anyOf" in node:
        options = [kind(option) for option in node["anyOf"] if option.get("type") != "null"]
        nullable = len(options) < len(node["anyOf"])
        return " or ".join(options) + (" or null" if nullable else "")
    if "const" in node:
        return f"`{json.dumps(node['const'])}`"
    if "enum" in node:
        return "one of " + ", ".join(f"`{value}`" for value in node["enum"])
    if node.get("type") == "array":
        if "prefixItems" in node:
            return "[" + ", ".join(kind(item) for item in node["prefixItems"]) + "]"
        return f"list of {kind(node['items'])}" if "items" in node else "list"
    if node.get("type") == "object":
        key = node.get("propertyNames", {}).get("description", "name")
        values = list(node.get("patternProperties", {}).values())
        if isinstance(node.get("additionalProperties"), dict):
            values.append(node["additionalProperties"])
        return f"mapping of {key} to {kind(values[0])}" if values else "mapping"
    if isinstance(node.get("type"), list):
        return " or ".join(node["type"])
    return str(node.get("type", "any"))


def _constraints(node: dict[str, Any]) -> list[str]:
    """What a value must satisfy beyond its type, its items' included."""
    found = [text.format(node[key]) for key, text in CONSTRAINTS.items() if key in node]
    if isinstance(node.get("items"), dict):
        found += [f"each {text}" for text in _constraints(node["items"])]
    for name in node.get("patternProperties", {}):
        found.append(f"names match `{name}`")
    return found


def _table(definition: dict[str, Any]) -> str:
    required = set(definition.get("required", []))
    rows = ["| field | type | default | description |", "| --- | --- | --- | --- |"]
    for name, node in definition.get("properties", {}).items():
        default = "required" if name in required else f"`{json.dumps(node['default'])}`" if "default" in node else ""
        described = node.get("description", "")
        if constraints := _constraints(node):
            described += f" ({'; '.join(constraints)})" if described else "; ".join(constraints)
        rows.append(f"| `{name}` | {_cell(kind(node))} | {_cell(default)} | {_cell(described)} |")
    return "\n".join(rows) + "\n"


def _title(stem: str) -> str:
    return {"tuned": "Tuned tables", "plan": "Plans", "layers": "Layers files", "trace": "Traces"}.get(
        stem, f"{stem.title()} files"
    )


def _stem(name: str) -> str:
    return name.split(".")[0]  # 'manifest.v1.json' -> 'manifest'


def format_page(name: str, schema: dict[str, Any], project: Project) -> str:
    """One schema's page: what the file is, its top level, then each definition."""
    committed = f"schemas/{name}"
    parts = [
        f"# {_title(_stem(name))}\n",
        f"{schema.get('description', '')}\n",
        f"JSON Schema: [`{committed}`]({project.blob(committed)}), generated from the models in `kcatalog.validate` "
        "by `kcatalog schema`. An editor with a YAML language server completes and checks a file that names it in "
        f"its first line, `# yaml-language-server: $schema=<path to {name}>`.\n",
        f"## {schema.get('title', _stem(name))} (top level)\n",
        _table(schema),
    ]
    for definition_name, definition in schema.get("$defs", {}).items():
        parts += [f"## {definition_name}\n", f"{definition.get('description', '')}\n", _table(definition)]
    return "\n".join(parts)


def format_pages(project: Project) -> dict[str, str]:
    """Each schema's page, and an index of them, by their path in the site."""
    schemas = {name: json.loads(text) for name, text in render_schemas().items()}
    pages = {
        f"reference/formats/{_stem(name)}.md": format_page(name, schema, project) for name, schema in schemas.items()
    }
    index = [
        "# File formats\n",
        "Every file kcatalog reads has a JSON Schema; each page below is generated from one.\n",
    ]
    for name, schema in schemas.items():
        description = _cell(schema.get("description", "").split("\n\n")[0])
        index.append(f"- [{_title(_stem(name))}](formats/{_stem(name)}.md): {description}")
    pages["reference/formats.md"] = "\n".join(index) + "\n"
    return pages
