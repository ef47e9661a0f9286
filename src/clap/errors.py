"""The one base class of mistakes a user can fix (bad file, bad config, missing path, refused
evidence). The `clap` command prints such an error as one line naming the file, row, key or rule,
and exits 2 — no traceback; anything else is a bug and keeps its traceback.
"""


class UserError(Exception):
    """A mistake the user can fix; the message names what to fix."""
