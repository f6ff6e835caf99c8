"""Stream a chat answer as it is written, then print what it cost in tokens and the request id
the platform gave it.

    ./zl up                      # in another terminal
    python sdk/examples/stream.py [--model smollm2-135m:sparse24] [question...]"""

from __future__ import annotations

import argparse

from zerolayer_sdk import Client


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="model or model:tier")
    parser.add_argument("question", nargs="*", default=["Tell me about Paris in three sentences."])
    args = parser.parse_args()
    with Client() as client:
        with client.chat.completions.create(
            model=args.model,
            messages=[{"role": "user", "content": " ".join(args.question)}],
            max_tokens=120,
            stream=True,
        ) as stream:
            for text in stream.text_stream:
                print(text, end="", flush=True)
        answer = stream.get_final_response()
    usage = answer.usage
    print()
    if usage is not None:
        print(f"tokens: {usage.prompt_tokens} in, {usage.completion_tokens} out ({answer.model})")
    print(f"request id: {stream.request_id}")


if __name__ == "__main__":
    main()
