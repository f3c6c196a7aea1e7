"""Preflight: every model endpoint a run will call answers one cheap request before the run folder
exists, so an unreachable server, a rejected key or a model the provider does not have is one line
(the role, the spec, the URL and what to check), not minutes of retries and a failed run left behind.

The request is a GET of the provider's model listing (free, no tokens): `/models/<model>` where the
provider's own host answers it (OpenAI, Anthropic: a 404 there means no such model), `/models` for
any other server. A vLLM server lists exactly the names it serves (`--served-model-name`, else the
model path), so a name it does not list is one line naming the ones it does; for other servers
(OpenAI-compatible, a proxy, which may accept aliases they do not list) only an answer at all and
the key count.
A busy server (429, 5xx) passes: the run's retries are for that. Embedded local models need none.
"""

from __future__ import annotations

from dataclasses import dataclass

from skillopt.errors import BadInput
from skillopt.models.spec import ModelSpec
from skillopt.models.types import ProviderEnv

OPENAI_HOST = "https://api.openai.com/v1"
ANTHROPIC_HOST = "https://api.anthropic.com"
KEY_VARIABLE = {"openai": "OPENAI_API_KEY", "anthropic": "ANTHROPIC_API_KEY", "azure": "AZURE_OPENAI_API_KEY",
                "vllm": "VLLM_API_KEY", "openai-compatible": "the key the server expects (OPENAI_API_KEY)"}


@dataclass(frozen=True)
class Probe:
    url: str
    headers: dict[str, str]
    official: bool  # the provider's own host: a 404 means it has no such model


def probe_for(spec: ModelSpec, env: ProviderEnv) -> Probe | None:
    """The one request that tells whether `spec`'s endpoint answers (None: nothing to check)."""
    from skillopt.models.providers import _split_credentials

    if spec.provider == "local":
        return None
    if spec.provider == "anthropic":
        base = (spec.base_url or env.anthropic_base_url or ANTHROPIC_HOST).rstrip("/")
        url, basic = _split_credentials(f"{base}/v1/models/{spec.model}")
        headers = {"x-api-key": env.anthropic_api_key or "not-needed", "anthropic-version": "2023-06-01"}
        if basic:
            headers["Authorization"] = basic
        return Probe(url, headers, official=base == ANTHROPIC_HOST)
    if spec.provider == "azure":
        base = (spec.base_url or env.azure_openai_endpoint or "").rstrip("/")
        url, basic = _split_credentials(f"{base}/openai/models?api-version={env.azure_openai_api_version}")
        headers = {"api-key": env.azure_openai_api_key} if env.azure_openai_api_key else {}
        return Probe(url, {**headers, **({"Authorization": basic} if basic else {})}, official=False) if base else None
    base = (spec.base_url or (env.openai_base_url if spec.provider == "openai" else None)
            or (OPENAI_HOST if spec.provider == "openai" else "")).rstrip("/")
    if not base:
        return None
    official = spec.provider == "openai" and base == OPENAI_HOST
    key = {"openai": env.openai_api_key, "vllm": env.vllm_api_key}.get(spec.provider)
    url, basic = _split_credentials(f"{base}/models/{spec.model}" if official else f"{base}/models")
    return Probe(url, {"Authorization": basic or f"Bearer {key or 'not-needed'}"}, official)


def check_endpoints(specs: dict[str, ModelSpec], env: ProviderEnv, timeout_s: float = 10.0) -> None:
    """Each distinct endpoint of `specs` (role -> spec) answers, else `BadInput` naming the role, the
    spec, the URL and what to check."""
    import httpx

    answers: dict[str, httpx.Response] = {}  # one request per URL, each role's model checked against it
    with httpx.Client(timeout=timeout_s, follow_redirects=True) as client:
        for role, spec in specs.items():
            probe = probe_for(spec, env)
            if probe is None:
                continue
            what = f"the {role} model {spec}"
            try:
                r = answers.get(probe.url) or client.get(probe.url, headers=probe.headers)
                answers[probe.url] = r
            except httpx.HTTPError as e:
                why = str(e).splitlines()[0] if str(e) else type(e).__name__
                raise BadInput(f"{what} does not answer at {probe.url} ({type(e).__name__}: {why}): check that the "
                               "server is running and the URL (host, port, /v1) in the spec") from None
            if r.status_code in (401, 403):
                raise BadInput(f"{what} refused the key at {probe.url} (HTTP {r.status_code}): check "
                               f"{KEY_VARIABLE.get(spec.provider, 'the key')}")
            if r.status_code == 404 and probe.official:
                raise BadInput(f"{what}: {spec.provider} has no model {spec.model!r} (HTTP 404 at {probe.url}): "
                               "check the model name")
            served = _served(r) if spec.provider == "vllm" else None
            if served and spec.model not in served:
                raise BadInput(f"{what}: the server at {probe.url} serves {', '.join(sorted(served)[:5])}, not "
                               f"{spec.model!r}: check the model name in the spec (vLLM's --served-model-name)")


def _served(r) -> set[str] | None:
    """The model names a `/models` answer lists (None: not a listing)."""
    if r.status_code != 200:
        return None
    try:
        data = r.json().get("data")
        return {str(m["id"]) for m in data} if isinstance(data, list) else None
    except (ValueError, AttributeError, KeyError, TypeError):
        return None
