"""Chat messages to a prompt. A tokenizer that has a chat template of its own
(apply_chat_template(messages) -> str, as Hugging Face tokenizers do) renders
them; any other gets Llama 3's format. The turn's end is a stop string too, so a
model that writes it ends its answer there even without an EOS token."""

from typing import List, Sequence, Tuple

ROLES = ("system", "user", "assistant", "tool")
# Llama 3's chat format (its special tokens, as text).
BEGIN = "<|begin_of_text|>"
END_OF_TURN = "<|eot_id|>"


def _header(role: str) -> str:
    return f"<|start_header_id|>{role}<|end_header_id|>\n\n"


def validate_messages(messages) -> List[dict]:
    """`messages` as OpenAI's chat API takes them (a list of {role, content});
    ValueError saying what is wrong."""
    if not isinstance(messages, list) or not messages:
        raise ValueError("messages must be a non-empty list of {role, content} objects")
    for index, message in enumerate(messages):
        if not isinstance(message, dict):
            raise ValueError(f"messages[{index}] is not an object")
        role, content = message.get("role"), message.get("content")
        if role not in ROLES:
            raise ValueError(f"messages[{index}].role must be one of {', '.join(ROLES)} "
                             f"(got {role!r})")
        if not isinstance(content, str):
            raise ValueError(f"messages[{index}].content must be a string")
    return messages


def llama3_prompt(messages: Sequence[dict]) -> str:
    turns = "".join(_header(m["role"]) + m["content"] + END_OF_TURN for m in messages)
    return BEGIN + turns + _header("assistant")


def render_chat(tokenizer, messages) -> Tuple[str, List[str]]:
    """The prompt for `messages` and the stop strings that end the assistant's turn."""
    messages = validate_messages(messages)
    template = getattr(tokenizer, "apply_chat_template", None)
    if callable(template):
        return template(messages), list(getattr(tokenizer, "chat_stop", ()))
    return llama3_prompt(messages), [END_OF_TURN]
