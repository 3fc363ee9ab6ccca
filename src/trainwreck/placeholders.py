"""What `trainwreck new` leaves to fill: lines that say TODO.

The scaffold writes values the schemas accept, each on a line with a TODO (in the value or in
the comment after it), so that a half-written entry checks and a half-written rule compiles.
`check` lists an entry's TODO lines as warnings; compile leaves a rule with any out of the
bundle, with one warning. A comment-only line (the file's header) is guidance, not a placeholder.
"""

from __future__ import annotations

import re

TODO = re.compile(r"\bTODO\b")


def placeholder_lines(text: str) -> list[int]:
    """The 1-based numbers of the lines that hold YAML content and say TODO."""
    return [
        number
        for number, line in enumerate(text.splitlines(), 1)
        if TODO.search(line) and not line.lstrip().startswith("#")
    ]
