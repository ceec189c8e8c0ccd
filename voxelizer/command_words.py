"""The library's messages in the `voxelize` command's words: the API names an option as a
keyword argument (`fill_mode="winding"`), the command as a flag (`--fill-mode winding`)."""

from __future__ import annotations

import re

_KEYWORD = re.compile(r"""\b(fill_mode|mode|surface)=(["'])(\w+)\2""")


def in_command_words(text: str) -> str:
    """`fill_mode="union"`, `mode='both'`, `surface='thin'` as `--fill-mode union`,
    `--mode both`, `--surface thin`."""
    return _KEYWORD.sub(lambda match: f"--{match[1].replace('_', '-')} {match[3]}", text)
