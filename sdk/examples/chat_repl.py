"""A chat in the terminal whose history the platform keeps (the Conversations API): each turn
sends only the new message, and the answer streams in as it is written.

    ./zl up                      # in another terminal
    python sdk/examples/chat_repl.py [--model smollm2-135m:dynamic]

The key and address come from ZEROLAYER_API_KEY / ZEROLAYER_BASE_URL, else from what `./zl up`
keeps on this machine. Ctrl-D ends the chat; the conversation stays, by its id."""

from __future__ import annotations

import argparse

from zerolayer_sdk import Client


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="smollm2-135m", help="model or model:tier")
    parser.add_argument("--max-tokens", type=int, default=200, help="longest answer, in tokens")
    args = parser.parse_args()
    with Client() as client:
        conversation = client.conversations.create(metadata={"app": "chat_repl"})
        print(f"conversation {conversation.id} on {args.model} (Ctrl-D to end)")
        while True:
            try:
                line = input("you> ").strip()
            except EOFError:
                print()
                return
            if not line:
                continue
            print("assistant> ", end="", flush=True)
            with client.responses.create(
                model=args.model,
                input=line,
                conversation=conversation.id,
                max_output_tokens=args.max_tokens,
                stream=True,
            ) as stream:
                for text in stream.text_stream:
                    print(text, end="", flush=True)
            print()


if __name__ == "__main__":
    main()
