"""``pynumabind report --redact``: what names this machine or its owner goes (pure).

The rule: identity goes, topology stays.

* **Host names** (``host``, ``hostname`` keys; the names the caller
  passes, wherever they appear as a word) become ``<host>``.
* **UUIDs and serials** become ``<uuid-N>`` / ``<serial-N>``, numbered in
  the order met, so one GPU keeps one token throughout the report and a
  ``CUDA_VISIBLE_DEVICES`` entry that names a GPU by a UUID prefix
  (``GPU-8d1c``) gets that GPU's token.  Found by key (``uuid``,
  ``serial``: AMD's KFD ids are not UUID-shaped) and by shape anywhere
  (``8-4-4-4-12`` hex; ``GPU-``/``MIG-`` followed by hex), keys of a mapping
  included.
* **The home directory** at the start of a path becomes ``~``.
* **PCI bus ids, CPU and node numbers, models, versions stay**: they are
  the topology the report is about, and name no one.

The same :class:`Redactor` is applied to the JSON document and to every
text line, so both forms say the same.
"""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence

__all__ = ["HOST", "Redactor"]

HOST = "<host>"

_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_PREFIXED = re.compile(r"(?<![\w-])(GPU|MIG)-([0-9a-fA-F]{4,}(?:-[0-9a-fA-F]+)*)(?![\w])")

#: Keys whose string value is an identity, and the token family it gets.
_KEYS = {"uuid": "uuid", "serial": "serial", "host": "host", "hostname": "host"}


class Redactor:
    """Replaces what names a machine or a person; see the module docstring.

    Call :meth:`learn` on everything first (every UUID anywhere, and the
    values of identity keys), then :meth:`document` and :meth:`text`: a UUID
    prefix met before the whole UUID then still gets the whole one's token.
    """

    def __init__(self, hosts: Sequence[str] = (), home: Optional[str] = None) -> None:
        self.hosts: List[str] = []
        self._add_hosts(hosts)
        self.home = home.rstrip("/") if home and home.rstrip("/") else None
        self.tokens: Dict[str, str] = {}  # a UUID's hex (or a serial) -> its token
        self.counts: Dict[str, int] = {}

    def _add_hosts(self, hosts: Sequence[str]) -> None:
        known = {*self.hosts, *(h for h in hosts if h and h != HOST)}
        self.hosts = sorted(known, key=len, reverse=True)

    def _token(self, value: str, family: str) -> str:
        key = value.lower()
        if key not in self.tokens:
            self.counts[family] = self.counts.get(family, 0) + 1
            self.tokens[key] = f"<{family}-{self.counts[family]}>"
        return self.tokens[key]

    @staticmethod
    def _bare(value: str) -> str:
        """A UUID-like value without its ``GPU-``/``MIG-`` (``MIG-GPU-``) kind."""
        while value[:4].upper() in ("GPU-", "MIG-"):
            value = value[4:]
        return value

    def _prefixed(self, match: re.Match[str]) -> str:
        kind, hexes = match.group(1), match.group(2).lower()
        known = [
            token
            for value, token in self.tokens.items()
            if token.startswith("<uuid-") and value.startswith(hexes)
        ]
        token = known[0] if len(set(known)) == 1 else self._token(hexes, "uuid")
        return f"{kind}-{token}"

    def text(self, value: str) -> str:
        """``value`` with every identity replaced."""
        value = _UUID.sub(lambda m: self._token(m.group(0), "uuid"), value)
        value = _PREFIXED.sub(self._prefixed, value)
        for raw, token in sorted(self.tokens.items(), key=lambda kv: -len(kv[0])):
            if token.startswith("<serial-"):
                value = re.sub(rf"(?<![\w-]){re.escape(raw)}(?![\w-])", token, value, flags=re.I)
        for host in self.hosts:
            value = re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", HOST, value)
        if self.home is not None:
            value = re.sub(rf"(?<![\w/]){re.escape(self.home)}(?=/|\b|$)", "~", value)
        return value

    def learn(self, value: Any, key: Optional[str] = None) -> None:
        """Register every UUID in ``value`` (strings and keys, at any depth), and its identities."""
        if isinstance(value, dict):
            for k, v in value.items():
                self.learn(str(k))
                self.learn(v, str(k))
        elif isinstance(value, (list, tuple)):
            for item in value:
                self.learn(item, key)
        elif isinstance(value, str) and value:
            for found in _UUID.findall(value):
                self._token(found, "uuid")
            family = _KEYS.get(key or "")
            if family == "host":
                self._add_hosts([value])
            elif family == "serial":
                self._token(value, "serial")
            elif family == "uuid" and not _UUID.search(value):
                self._token(self._bare(value), "uuid")

    def document(self, value: Any, key: Optional[str] = None) -> Any:
        """A copy of a JSON value with every identity replaced (after :meth:`learn`)."""
        if isinstance(value, dict):
            return {self.text(str(k)): self.document(v, str(k)) for k, v in value.items()}
        if isinstance(value, list):
            return [self.document(item, key) for item in value]
        if isinstance(value, str) and value:
            family = _KEYS.get(key or "")
            if family == "host":
                return HOST
            if family == "serial":
                return self._token(value, "serial")
            if family == "uuid" and not _UUID.search(value) and not _PREFIXED.search(value):
                return self._token(self._bare(value), "uuid")
            return self.text(value)
        return value

    def lines(self, lines: Sequence[str]) -> List[str]:
        return [self.text(line) for line in lines]
