"""The chat model from config.yaml's `model:` section, written either way a user has one.

This host's own shape is `{base_url, name, api_key_env}`; Hermes Agent writes `model:` as a model
name or as `{provider, base_url, default, api_key}`, and one config.yaml serves both hosts. Both
are read (a provider names its OpenAI-compatible endpoint and key variable); keys that only Hermes
uses are said once, never silently dropped, so a request never goes out to a model nobody chose.
"""

from __future__ import annotations

import os

from hermes_kb.agent.knowledgebase.config import ConfigError, did_you_mean, expand, show
from hermes_kb.agent.llm import LLMConfig

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_MODEL = "gpt-4o-mini"
# provider -> (OpenAI-compatible endpoint, the environment variable holding its key)
PROVIDERS = {
    "openai": (DEFAULT_BASE_URL, "OPENAI_API_KEY"),
    "openrouter": ("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "anthropic": ("https://api.anthropic.com/v1", "ANTHROPIC_API_KEY"),
    "gemini": ("https://generativelanguage.googleapis.com/v1beta/openai", "GEMINI_API_KEY"),
    "deepseek": ("https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
    "groq": ("https://api.groq.com/openai/v1", "GROQ_API_KEY"),
    "mistral": ("https://api.mistral.ai/v1", "MISTRAL_API_KEY"),
    "ollama": ("http://localhost:11434/v1", "OLLAMA_API_KEY"),
    "custom": (None, "OPENAI_API_KEY"),
}
USED = ("base_url", "name", "default", "model", "provider", "api_key", "api_key_env")
# Hermes Agent's own model settings: meaningful there, not to this chat.
HERMES_ONLY = ("context_length", "api_mode", "auth_mode", "entra", "openai_runtime", "max_tokens", "supports_vision",
               "persist_switch_by_default", "ollama_num_ctx", "api")


def llm_config(section: object, base_url: str | None = None, model: str | None = None) -> tuple[LLMConfig, list[str]]:
    """(the chat's model, notes on settings this chat does not use); a setting it cannot use is an error."""
    if isinstance(section, str):
        section = {"name": section}
    section = section or {}
    if not isinstance(section, dict):
        raise ConfigError("model must be a model name or a mapping with base_url, name and api_key_env "
                          "(or Hermes's provider, base_url and default).")
    notes = []
    for key in section:
        if key in HERMES_ONLY:
            notes.append(f"model.{key} is a Hermes Agent setting; `hermes chat` here does not use it.")
        elif key not in USED:
            close = did_you_mean(key, USED)
            raise ConfigError(f"model.{show(key) if not isinstance(key, str) else key} is not a known setting"
                              + (f"; did you mean {close}?" if close else f", which accepts {', '.join(USED)}."))
    provider = section.get("provider") or "openai"
    if not isinstance(provider, str) or provider.lower() not in PROVIDERS:
        raise ConfigError(f"model.provider {show(provider)} is not one this chat knows ({', '.join(PROVIDERS)}); "
                          f"give model.base_url for any OpenAI-compatible endpoint.")
    provider_url, provider_key = PROVIDERS[provider.lower()]
    url = base_url or section.get("base_url") or provider_url
    if url is None:
        raise ConfigError("model.provider custom needs model.base_url, the endpoint's URL.")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise ConfigError(f"model.base_url must be an http:// or https:// URL, not {show(url)}.")
    name = model or section.get("name") or section.get("default") or section.get("model") or DEFAULT_MODEL
    if not isinstance(name, str) or not name.strip():
        raise ConfigError(f"model.name must be a model name, not {show(name)}.")
    key_env = section.get("api_key_env", provider_key)
    if not isinstance(key_env, str) or not key_env:
        raise ConfigError(f"model.api_key_env must be the name of an environment variable, not {show(key_env)}.")
    key = section.get("api_key")
    if key is not None and not isinstance(key, str):
        raise ConfigError("model.api_key must be text (or leave it out and set model.api_key_env).")
    key = expand(key) if key else os.environ.get(key_env)
    return LLMConfig(base_url=expand(url), model=name, api_key=key or None), notes
