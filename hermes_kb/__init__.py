"""Hermes knowledgebase: one uniquely named import package.

Inside it the layout mirrors Hermes Agent's (`agent/`, `tools/`, `hermes_cli/`),
but under a name of its own, so installing it beside hermes-agent never
overwrites Hermes's packages (see docs/architecture.md, "Living beside Hermes").
"""
