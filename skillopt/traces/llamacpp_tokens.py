"""llama.cpp as a token source: the fields vLLM returns for `return_token_ids`, made from the
embedded llama.cpp server's own endpoints, so `local:` targets feed the same capture proxy and the
same datasets as `vllm:` targets (one code path, two backends).

llama.cpp's chat completions return no prompt ids, but with `logprobs` every generated token comes
with its id (`choices[i].logprobs.content[j].id`, the end-of-generation token included when the
reply stopped on it). `TokenShim` is a small ASGI app that the capture child (skillopt.traces.
capture_proxy) serves between LiteLLM and llama.cpp. For a chat completion that asks for
`return_token_ids` it:

- sends the request on with `logprobs` on, and, at the same time, the same body to
  `/apply-template`: the prompt text the server renders from those messages and tools (the same
  parser and the model's own Jinja chat template as the completion itself);
- tokenizes that text with `/tokenize` (`add_special` and `parse_special`, as the server tokenizes
  a chat prompt) and adds the ids as `prompt_token_ids`, but only when their count equals the
  server's own `usage.prompt_tokens` (else the ids are not what the model read: none are added, the
  row is skipped, and the proxy log says so);
- adds each choice's `token_ids` from its logprobs' ids.

A completion has no wall-clock limit here: a CPU may read a long agent prompt for many minutes. It
fails (504) only when the server did no work for `no_progress_s` while it was open, the rule of every
call to the embedded model (skillopt.models.local.progress: the server's `/slots`, read every few
seconds). The capture proxy's LiteLLM, in front of the shim, waits as long (`tokens.model_list`).

Every other request passes through unchanged. `LlamaCppTokens` is the client side of the same
endpoints, for checks: `decode` (`/detokenize`, special tokens rendered) and `next_logprobs`, the
server's top log-probabilities of the next token after given ids (`/completion` with `n_probs`),
to recompute a captured logprob.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import httpx

from skillopt.models.local.progress import POLL_S, NoProgress, ServerProgress, within_progress
from skillopt.traces.capture_proxy import read_body

_DROPPED = (b"content-length", b"content-encoding", b"transfer-encoding", b"connection")


class TokenShim:
    """ASGI app: llama.cpp at `upstream` (http://HOST:PORT), answering like vLLM with token ids."""

    def __init__(self, upstream: str, timeout_s: float = 3600.0, no_progress_s: float = 600.0,
                 poll_s: float = POLL_S):
        self.upstream = upstream.rstrip("/")
        self.timeout_s = timeout_s  # any request but a completion with ids (template, tokenizer, pass-through)
        self.no_progress_s = no_progress_s
        self.progress = ServerProgress(self.upstream, self._read_json, poll_s)
        self._client: httpx.AsyncClient | None = None

    @property
    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self.timeout_s, trust_env=False)
        return self._client

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            return await _lifespan(receive, send)
        if scope["type"] != "http":
            return
        raw = await read_body(receive)
        path = scope["path"] + (f"?{scope['query_string'].decode()}" if scope.get("query_string") else "")
        body = _json(raw) if scope["method"] == "POST" and scope["path"].endswith("/chat/completions") else None
        if isinstance(body, dict) and body.pop("return_token_ids", False) and not body.get("stream"):
            status, headers, out = await self.chat_with_ids(body)
        else:
            status, headers, out = await self.forward(scope["method"], path, scope["headers"], raw)
        await send({"type": "http.response.start", "status": status,
                    "headers": headers + [(b"content-length", str(len(out)).encode())]})
        await send({"type": "http.response.body", "body": out})

    async def forward(self, method: str, path: str, headers: list, raw: bytes) -> tuple[int, list, bytes]:
        keep = {k.decode(): v.decode() for k, v in headers if k.lower() not in (b"host", *_DROPPED)}
        r = await self.client.request(method, self.upstream + path, content=raw, headers=keep)
        return r.status_code, _headers(r), r.content

    async def chat_with_ids(self, body: dict[str, Any]) -> tuple[int, list, bytes]:
        """The completion with `logprobs`, plus `prompt_token_ids` and each choice's `token_ids`."""
        body = {**body, "logprobs": True}
        completion = self.client.post(f"{self.upstream}/v1/chat/completions", json=body, timeout=None)
        answer, template = await asyncio.gather(
            within_progress(completion, self.progress, self.no_progress_s),
            self.client.post(f"{self.upstream}/apply-template", json=body), return_exceptions=True)
        if isinstance(answer, NoProgress):
            error = {"error": {"message": f"the local model: {answer}", "type": "timeout", "code": 504}}
            return 504, [(b"content-type", b"application/json")], json.dumps(error).encode()
        if isinstance(answer, BaseException):
            raise answer
        data = _json(answer.content)
        if answer.status_code != 200 or not isinstance(data, dict):
            return answer.status_code, _headers(answer), answer.content
        prompt_ids = await self._prompt_ids(template)
        counted = (data.get("usage") or {}).get("prompt_tokens")
        if prompt_ids is not None and len(prompt_ids) == counted:
            data["prompt_token_ids"] = prompt_ids
        else:
            got = "no ids" if prompt_ids is None else f"{len(prompt_ids)} ids"
            print(f"skillopt token shim: prompt of {data.get('id')} not added: {got} from /apply-template + "
                  f"/tokenize, the server counted {counted}", file=sys.stderr, flush=True)
        for choice in data.get("choices") or []:
            content = (choice.get("logprobs") or {}).get("content") if isinstance(choice, dict) else None
            if isinstance(content, list) and content and all(isinstance(t, dict) and "id" in t for t in content):
                choice["token_ids"] = [int(t["id"]) for t in content]
        return 200, _headers(answer), json.dumps(data, ensure_ascii=False).encode()

    async def _prompt_ids(self, template: Any) -> list[int] | None:
        if isinstance(template, BaseException) or template.status_code != 200:
            return None
        prompt = (_json(template.content) or {}).get("prompt")
        if not isinstance(prompt, str):
            return None
        r = await self.client.post(f"{self.upstream}/tokenize",
                                   json={"content": prompt, "add_special": True, "parse_special": True})
        ids = (_json(r.content) or {}).get("tokens") if r.status_code == 200 else None
        return [int(i) for i in ids] if isinstance(ids, list) and all(isinstance(i, int) for i in ids) else None

    async def _read_json(self, url: str, timeout_s: float) -> Any:
        r = await self.client.get(url, timeout=timeout_s)
        return _json(r.content) if r.status_code == 200 else None

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()


def _json(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None


def _headers(r: httpx.Response) -> list[tuple[bytes, bytes]]:
    return [(k.encode(), v.encode()) for k, v in r.headers.items() if k.lower().encode() not in _DROPPED]


async def _lifespan(receive: Any, send: Any) -> None:
    while True:
        message = await receive()
        if message["type"] == "lifespan.startup":
            await send({"type": "lifespan.startup.complete"})
        elif message["type"] == "lifespan.shutdown":
            await send({"type": "lifespan.shutdown.complete"})
            return


class LlamaCppTokens:
    """The llama.cpp server's tokenizer and scorer, over HTTP (`base_url`: http://HOST:PORT).

    `decode(ids)` renders special tokens (`<|im_end|>`), as the prompt the model read has them;
    it is what `TokenCapture(tokenizer=...)` takes for the `prompt` column. Raises `httpx.HTTPError`
    when the server does not answer.
    """

    def __init__(self, base_url: str, timeout_s: float = 120.0):
        self.base_url = base_url.rstrip("/").removesuffix("/v1")
        self.timeout_s = timeout_s

    def _post(self, route: str, body: dict[str, Any]) -> dict[str, Any]:
        with httpx.Client(timeout=self.timeout_s, trust_env=False) as client:
            r = client.post(f"{self.base_url}{route}", json=body)
            r.raise_for_status()
            return r.json()

    def decode(self, ids: list[int], skip_special_tokens: bool = False) -> str:
        return str(self._post("/detokenize", {"tokens": list(ids)})["content"])

    def encode(self, text: str) -> list[int]:
        return [int(i) for i in self._post("/tokenize", {"content": text, "add_special": True,
                                                         "parse_special": True})["tokens"]]

    def next_logprobs(self, ids: list[int], n: int = 20) -> dict[int, float]:
        """The model's `n` most likely next tokens after `ids` and their log-probabilities (before sampling)."""
        data = self._post("/completion", {"prompt": list(ids), "n_predict": 1, "n_probs": n, "temperature": 0,
                                          "post_sampling_probs": False, "cache_prompt": True})
        probs = data.get("completion_probabilities") or [{}]
        return {int(t["id"]): float(t["logprob"]) for t in probs[0].get("top_logprobs") or []}
