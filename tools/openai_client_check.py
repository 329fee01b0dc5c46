"""Checks amdahl against the official OpenAI Python client (pip `openai`).

Run by tools/openai_client_test.sh, which starts `amdahl serve` on 127.0.0.1 with a free port and
passes its URL and API key. Streams a chat completion (role chunk, content chunks, finish reason,
usage chunk), runs non-streamed chat and completions, lists models, and checks that a bad
parameter raises the SDK's BadRequestError and a wrong key its AuthenticationError.
"""

import sys

import openai
from openai import OpenAI


def main(url: str, key: str) -> int:
    client = OpenAI(base_url=url + "/v1", api_key=key, max_retries=0, timeout=60)
    checks = []

    def check(name, cond, detail=""):
        checks.append((name, bool(cond)))
        print(("ok   " if cond else "FAIL ") + name + (f": {detail}" if detail and not cond else ""))

    models = client.models.list()
    model = models.data[0].id
    check("models.list returns the served model", model, models)

    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "17*23"}],
        max_tokens=8,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"ignore_eos": True},
    )
    chunks = list(stream)
    content_chunks = [c for c in chunks if c.choices]
    check("first chunk carries the assistant role", content_chunks[0].choices[0].delta.role == "assistant")
    text = "".join(c.choices[0].delta.content or "" for c in content_chunks)
    finish = [c.choices[0].finish_reason for c in content_chunks if c.choices[0].finish_reason]
    check("stream ends with finish_reason length", finish == ["length"], finish)
    usage = chunks[-1].usage
    check("final chunk has usage and no choices", usage is not None and chunks[-1].choices == [], chunks[-1])
    check("usage counts 8 completion tokens", usage and usage.completion_tokens == 8, usage)
    check("all chunks share one id", len({c.id for c in chunks}) == 1)

    full = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "17*23"}],
        max_tokens=8,
        temperature=0,
        extra_body={"ignore_eos": True},
    )
    check("non-streamed chat equals the stream (greedy)", full.choices[0].message.content == text,
          (full.choices[0].message.content, text))

    comp = client.completions.create(model=model, prompt="1+1=", max_tokens=4, temperature=0,
                                     extra_body={"ignore_eos": True})
    check("completions returns 4 tokens", comp.usage.completion_tokens == 4, comp.usage)

    try:
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": "x"}],
                                       temperature=5)
        check("temperature 5 is refused", False)
    except openai.BadRequestError as e:
        check("temperature 5 is refused with 400", e.status_code == 400 and e.body["param"] == "temperature", e.body)

    bad = OpenAI(base_url=url + "/v1", api_key="wrong-key", max_retries=0)
    try:
        bad.models.list()
        check("a wrong key is refused", False)
    except openai.AuthenticationError as e:
        check("a wrong key is refused with 401", e.status_code == 401)

    passed = sum(1 for _, ok in checks if ok)
    failed = len(checks) - passed
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
