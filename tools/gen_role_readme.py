#!/usr/bin/env python
"""The variables section of each role's README, from meta/argument_specs.yml (run by
tools/gen_declared.py, `make generated`, with the other files derived from the declarations).

    .venv/bin/python tools/gen_role_readme.py          # rewrite the READMEs only
    .venv/bin/python tools/gen_role_readme.py --check  # exit 1 when a README is stale

The README keeps everything outside the markers <!-- BEGIN VARIABLES --> / <!-- END VARIABLES -->.
"""
from __future__ import annotations

import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- BEGIN VARIABLES -->", "<!-- END VARIABLES -->"


def _cell(value: object) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def render(specs: dict) -> str:
    out = [BEGIN, "", "_Generated from meta/argument_specs.yml by tools/gen_declared.py (`make generated`)._", ""]
    seen: dict[int, str] = {}  # an entry point whose options are another's (a YAML alias) points there
    for entry, spec in specs["argument_specs"].items():
        out.append(f"### Entry point `{entry}`: {spec.get('short_description', '')}")
        out.append("")
        options = spec.get("options") or {}
        if options and id(options) in seen:
            out.append(f"The same variables as the entry point `{seen[id(options)]}`.")
            out.append("")
            continue
        seen[id(options)] = entry
        out.append("| variable | type | default | description |")
        out.append("|---|---|---|---|")
        for name, opt in options.items():
            default = "(required)" if opt.get("required") else opt.get("default", "")
            if isinstance(default, (list, dict)):
                default = yaml.safe_dump(default, default_flow_style=True).strip()
            typ = opt.get("type", "str")
            if opt.get("choices"):
                typ += " (" + ", ".join(str(c) if c != "" else '""' for c in opt["choices"]) + ")"
            desc = opt.get("description", "")
            if isinstance(desc, list):
                desc = " ".join(desc)
            out.append(f"| `{name}` | {_cell(typ)} | `{_cell(default)}` | {_cell(desc)} |")
        out.append("")
    out.append(END)
    return "\n".join(out)


def main(argv: list[str]) -> int:
    stale = []
    for specs_path in sorted(ROOT.glob("roles/*/meta/argument_specs.yml")):
        role_dir = specs_path.parents[1]
        readme = role_dir / "README.md"
        text = readme.read_text() if readme.exists() else f"# {role_dir.name}\n\n{BEGIN}\n{END}\n"
        if BEGIN not in text:
            text += f"\n## Variables\n\n{BEGIN}\n{END}\n"
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        new = head + render(yaml.safe_load(specs_path.read_text())) + tail
        if new != text:
            stale.append(str(readme.relative_to(ROOT)))
            if "--check" not in argv:
                readme.write_text(new)
    if stale and "--check" in argv:
        print("stale role READMEs (run tools/gen_role_readme.py):", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
