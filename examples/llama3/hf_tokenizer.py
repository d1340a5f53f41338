"""A Hugging Face tokenizer (tokenizer.json, tokenizer_config.json) behind chorus.generation's
Tokenizer protocol, with the checkpoint's own chat template. Shipped in the archive with
the model: it holds the files' text and rebuilds the `tokenizers` object where it is
unpickled, so the archive needs nothing but the `tokenizers` and `jinja2` packages.
"""

import json
from datetime import datetime
from typing import List, Optional, Sequence

import jinja2
import jinja2.sandbox
import tokenizers


def _token_text(value) -> Optional[str]:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    return value.get("content") if isinstance(value, dict) else value


class HfTokenizer:
    def __init__(self, tokenizer_json: str, tokenizer_config: Optional[dict] = None,
                 eos_token_ids: Sequence[int] = ()):
        self.tokenizer_json = tokenizer_json
        self.config = dict(tokenizer_config or {})
        self._tokenizer = tokenizers.Tokenizer.from_str(tokenizer_json)
        self.bos_token = _token_text(self.config.get("bos_token"))
        self.eos_token = _token_text(self.config.get("eos_token"))
        ids = list(eos_token_ids)
        if not ids and self.eos_token is not None:
            ids = [self._tokenizer.token_to_id(self.eos_token)]
        self.eos_token_ids = [i for i in ids if i is not None]

    def __getstate__(self):
        return {"tokenizer_json": self.tokenizer_json, "config": self.config,
                "eos_token_ids": self.eos_token_ids}

    def __setstate__(self, state):
        self.__init__(state["tokenizer_json"], state["config"], state["eos_token_ids"])

    @property
    def vocab_size(self) -> int:
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def encode(self, text: str) -> List[int]:
        """Token ids of `text`, led by the BOS token when the tokenizer adds one (as
        Hugging Face and vLLM do for a completion) and the text does not start with it
        (a chat prompt already does)."""
        special = not (self.bos_token and text.startswith(self.bos_token))
        return self._tokenizer.encode(text, add_special_tokens=special).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=True)

    @property
    def chat_stop(self) -> List[str]:
        return []  # the template's end of turn is an EOS token

    def apply_chat_template(self, messages) -> str:
        """`messages` rendered with the checkpoint's chat template, ending with the
        assistant's header; ValueError when it has none."""
        source = self.config.get("chat_template")
        if isinstance(source, list):  # named templates: the default one
            source = next((t["template"] for t in source if t.get("name") == "default"), None)
        if not source:
            raise ValueError("the tokenizer has no chat template (tokenizer_config.json's "
                             "chat_template): use the completions API")

        def raise_exception(message):
            raise ValueError(message)

        # As transformers renders chat templates.
        environment = jinja2.sandbox.ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"])
        environment.globals["raise_exception"] = raise_exception
        environment.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        environment.filters["tojson"] = lambda value, indent=None: json.dumps(value,
                                                                              indent=indent)
        return environment.from_string(source).render(
            messages=messages, add_generation_prompt=True, bos_token=self.bos_token or "",
            eos_token=self.eos_token or "")
