"""A module the fuzz tests name in ``!!python/...`` tags: if YAML ever honoured one, this would be imported.

Nothing imports it on purpose; the fuzz tests check that it never appears in ``sys.modules``.
"""

FIRED: list[str] = []


def fire(*args: object) -> str:
    FIRED.append("fire")
    return "fired"


class Thing:
    def __init__(self, *args: object) -> None:
        FIRED.append("Thing")
