"""`hermes kb token add|list|remove`: the bearer tokens of the HTTP MCP server (mcp_tokens.py).

A new token is printed once, alone on the last line of stdout, so `| tail -1` captures it; it is
never stored, logged or shown again. Only from a terminal: a token printed into a chat would sit in
its transcript and in the model's context.
"""

from __future__ import annotations

import json

from rich.console import Console
from rich.markup import escape

from hermes_kb.agent.knowledgebase.service import KnowledgeBase
from hermes_kb.mcp_tokens import SCOPES, TokenError, TokenFile, token_file

NOT_IN_CHAT = "Tokens are managed from a terminal (`hermes kb token ...`): a token shown in a chat stays in its transcript."


def add_parser(verbs) -> None:
    token = verbs.add_parser("token", help="bearer tokens for `hermes kb mcp --http` (add, list, remove)")
    actions = token.add_subparsers(dest="token_action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="make a token; printed once, on the last line")
    add.add_argument("name", help="who or what holds it (logged with what it does)")
    add.add_argument("--scope", choices=SCOPES, default="read",
                     help="read: search, read, status; write: + index configured folders; admin: + clear, new folders")
    listed = actions.add_parser("list", help="token names, scopes and dates (never the tokens)")
    remove = actions.add_parser("remove", help="revoke a token; a running server refuses it from its next request")
    remove.add_argument("name")
    for sub in (add, listed, remove):
        sub.add_argument("--json", action="store_true", help="print JSON")


def run_token(kb: KnowledgeBase, args, out: Console, err: Console, foreground: bool = True) -> int:
    if not foreground:
        err.print(escape(NOT_IN_CHAT))
        return 1
    tokens = TokenFile(token_file(kb.hermes_home))
    try:
        if args.token_action == "add":
            token = tokens.add(args.name, args.scope)
            if args.json:
                print(json.dumps({"name": args.name, "scope": args.scope, "token": token}))
            else:
                err.print(f"Token {escape(args.name)} ({args.scope}) added to {escape(str(tokens.path))}. It is shown "
                          f"once, below; clients send it as `Authorization: Bearer TOKEN`.", highlight=False)
                print(token, flush=True)  # alone on the last line, unwrapped and uncoloured
            return 0
        if args.token_action == "remove":
            tokens.remove(args.name)
            if args.json:
                print(json.dumps({"removed": args.name}))
            else:
                out.print(f"Removed token {escape(args.name)}.", highlight=False)
            return 0
        rows = tokens.listed()
    except TokenError as exc:
        if args.json:
            print(json.dumps({"error": str(exc)}))
        else:
            err.print(f"[red]error:[/] {escape(str(exc))}")
        return 1
    if args.json:
        print(json.dumps(rows))
    elif not rows:
        out.print("No tokens: `hermes kb mcp --http` serves this machine only (127.0.0.1).", highlight=False)
    else:
        for row in rows:
            out.print(f"{escape(row['name'])}  {row['scope']}  {row.get('created') or ''}", highlight=False)
    return 0
