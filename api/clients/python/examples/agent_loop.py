"""An agent loop with long-term memory: recall before each LLM call, append after it.

Works with any OpenAI-compatible chat endpoint. Run an embedded sediment (`sediment`), then:

    OPENAI_BASE_URL=http://127.0.0.1:11434/v1 OPENAI_MODEL=llama3.1 python examples/agent_loop.py

Settings: SEDIMENT_URL (default http://127.0.0.1:8080), SEDIMENT_API_KEY (when auth is on),
SEDIMENT_TEAM, SEDIMENT_AGENT, SEDIMENT_USER; OPENAI_BASE_URL, OPENAI_API_KEY, OPENAI_MODEL.
"""

import os
import uuid

import httpx

from sediment_client import Client, SedimentError


def chat(messages):
    """One completion from the OpenAI-compatible endpoint."""
    response = httpx.post(
        f"{os.environ.get('OPENAI_BASE_URL', 'https://api.openai.com/v1').rstrip('/')}/chat/completions",
        headers={"authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', '')}"},
        json={"model": os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), "messages": messages},
        timeout=120,
    )
    response.raise_for_status()
    return response.json()["choices"][0]["message"]["content"]


def main():
    session = f"chat-{uuid.uuid4().hex[:8]}"
    memory = Client(
        os.environ.get("SEDIMENT_URL", "http://127.0.0.1:8080"),
        api_key=os.environ.get("SEDIMENT_API_KEY"),
        team=os.environ.get("SEDIMENT_TEAM", "home"),
        agent=os.environ.get("SEDIMENT_AGENT", "example-agent"),
        user=os.environ.get("SEDIMENT_USER", "me"),
    )
    history = []
    while True:
        try:
            question = input("you> ").strip()
        except EOFError:
            break
        if not question:
            continue
        # Before the call: what earlier conversations taught, for this message. The stable part
        # (persona, scene map, tool guide) belongs at the end of the system prompt, where it
        # keeps the provider's prompt cache warm; the dynamic part prefixes the user message.
        try:
            recalled = memory.recall(question, session_id=session)
            system, context = "\n\n".join(
                part for part in (recalled.stable.persona, recalled.stable.scene_navigation) if part
            ), recalled.context()
        except SedimentError as e:  # memory is an aid: answer without it rather than fail
            print(f"(memory unavailable: {e})")
            system, context = "", ""
        messages = [{"role": "system", "content": f"You are a helpful assistant.\n\n{system}".strip()}]
        messages += history
        messages.append({"role": "user", "content": f"{context}\n\n{question}".strip()})
        answer = chat(messages)
        print(f"assistant> {answer}")
        history += [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]
        # After the call: keep the exchange verbatim (the injected context is not stored).
        memory.append(session, [{"role": "user", "content": question}, {"role": "assistant", "content": answer}])
    memory.close()


if __name__ == "__main__":
    main()
