"""An incremental JSON checker for one object, one character at a time.

:class:`ObjectScan` tells, for each character it takes, whether the text so far is still
a prefix of one valid JSON object (RFC 8259), and which part of the object the character
belongs to: the object's own structure, a key of the object, or the value of one of its
members (nested values included). The tool-call parsers read a call object with it, so
they can stream an argument value while it is generated and know at once when it breaks.
Its state is a stack of open containers: memory grows with nesting, never with length.
"""

from __future__ import annotations

from enum import Enum, auto

_WS = " \t\n\r"
_DIGITS = "0123456789"
_HEX = "0123456789abcdefABCDEF"
_ESCAPES = '"\\/bfnrt'
_LITERALS = {"t": "rue", "f": "alse", "n": "ull"}
#: Number states that may end a number: "0", digits, fraction digits, exponent digits.
_NUMBER_ENDS = ("0", "int", "frac", "exp")


class Part(Enum):
    """What a character is to the outer object."""

    STRUCTURE = auto()  # its braces, colons, commas, whitespace between members
    KEY = auto()  # a member name, quotes included
    VALUE = auto()  # a member value (a nested value's every character)


class _S(Enum):
    VALUE = auto()  # a value is expected
    ARRAY_START = auto()  # after "[": a value or "]"
    OBJECT_START = auto()  # after "{": a key or "}"
    KEY = auto()  # after "," in an object: a key
    COLON = auto()
    AFTER = auto()  # after a value inside a container: "," or the closing bracket
    STRING = auto()
    ESCAPE = auto()
    HEX = auto()
    NUMBER = auto()
    LITERAL = auto()


def _number_step(state: str, c: str) -> str | None:
    """The number state after ``c``, or None when ``c`` does not continue the number."""
    if c in _DIGITS:
        if state in ("", "-"):
            return "0" if c == "0" else "int"
        return {
            "int": "int",
            ".": "frac",
            "frac": "frac",
            "e": "exp",
            "sign": "exp",
            "exp": "exp",
        }.get(state)
    if c == "-" and state == "":
        return "-"
    if c == "." and state in ("0", "int"):
        return "."
    if c in "eE" and state in ("0", "int", "frac"):
        return "e"
    if c in "+-" and state == "e":
        return "sign"
    return None


class ObjectScan:
    """Reads one JSON object (leading whitespace allowed). :meth:`push` raises
    ValueError for a character that cannot continue it; :attr:`done` once it closed."""

    def __init__(self) -> None:
        self.done = False
        self._stack: list[str] = []
        self._state = _S.VALUE
        self._member = False  # reading a member value of the outer object
        self._outer_key = False  # reading a key of the outer object
        self._in_key = False  # the string being read is a key (at any depth)
        self._rest = ""  # the rest of a literal
        self._number = ""
        self._hex = 0

    def push(self, c: str) -> Part:
        """Take one character; what it is to the outer object."""
        if self.done:
            raise ValueError("text after the end of the object")
        state = self._state
        if state in (_S.STRING, _S.ESCAPE, _S.HEX):
            return self._string(c)
        if state is _S.LITERAL:
            if c != self._rest[:1]:
                raise ValueError(f"unexpected {c!r} in a literal")
            self._rest = self._rest[1:]
            if not self._rest:
                self._after_value()
            return Part.VALUE
        if state is _S.NUMBER:
            step = _number_step(self._number, c)
            if step is not None:
                self._number = step
                return Part.VALUE
            if self._number not in _NUMBER_ENDS:
                raise ValueError(f"unexpected {c!r} in a number")
            self._after_value()
            return self.push(c)
        if c in _WS:
            return self._part()
        if state is _S.COLON:
            if c != ":":
                raise ValueError(f"expected ':', got {c!r}")
            self._state = _S.VALUE
            return self._part()
        if state in (_S.OBJECT_START, _S.KEY):
            if state is _S.OBJECT_START and c == "}":
                return self._close(c)
            if c != '"':
                raise ValueError(f"expected a member name, got {c!r}")
            self._in_key, self._state = True, _S.STRING
            self._outer_key = len(self._stack) == 1
            return self._part()
        if state is _S.AFTER:
            if c == ",":
                self._state = _S.KEY if self._stack[-1] == "{" else _S.VALUE
                return self._part()
            return self._close(c)
        if state is _S.ARRAY_START and c == "]":
            return self._close(c)
        return self._value(c)

    def _value(self, c: str) -> Part:
        if not self._stack and c != "{":
            raise ValueError(f"expected an object, got {c!r}")
        if len(self._stack) == 1:
            self._member = True
        part = self._part()
        if c in "{[":
            self._stack.append(c)
            self._state = _S.OBJECT_START if c == "{" else _S.ARRAY_START
        elif c == '"':
            self._in_key, self._state = False, _S.STRING
        elif c == "-" or c in _DIGITS:
            self._number, self._state = _number_step("", c) or "", _S.NUMBER
        elif c in _LITERALS:
            self._rest, self._state = _LITERALS[c], _S.LITERAL
        else:
            raise ValueError(f"expected a value, got {c!r}")
        return part

    def _string(self, c: str) -> Part:
        part = self._part()
        if self._state is _S.ESCAPE:
            if c == "u":
                self._hex, self._state = 4, _S.HEX
            elif c in _ESCAPES:
                self._state = _S.STRING
            else:
                raise ValueError(f"bad escape \\{c}")
        elif self._state is _S.HEX:
            if c not in _HEX:
                raise ValueError(f"bad \\u escape digit {c!r}")
            self._hex -= 1
            if not self._hex:
                self._state = _S.STRING
        elif c == "\\":
            self._state = _S.ESCAPE
        elif c == '"':
            if self._in_key:
                self._in_key = self._outer_key = False
                self._state = _S.COLON
            else:
                self._after_value()
        elif c < " ":
            raise ValueError("control character in a string")
        return part

    def _close(self, c: str) -> Part:
        if not self._stack or c != {"{": "}", "[": "]"}[self._stack[-1]]:
            raise ValueError(f"unexpected {c!r}")
        part = self._part()
        self._stack.pop()
        self._after_value()
        return part

    def _after_value(self) -> None:
        if not self._stack:
            self.done = True
            return
        self._state = _S.AFTER
        if len(self._stack) == 1:
            self._member = False

    def _part(self) -> Part:
        if self._outer_key:
            return Part.KEY
        return Part.VALUE if self._member else Part.STRUCTURE
