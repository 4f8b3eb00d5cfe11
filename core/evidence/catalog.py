"""The service graph: Backstage catalog entities (``Component`` and ``Resource``) by name, what each depends on
(``spec.dependsOn``), who owns it (``spec.owner``), its system, links and annotations.

Entity references follow Backstage's ``[kind:][namespace/]name`` form; the graph is keyed by the lower-cased
``name`` (incidents name services by their bare name, and so do the ``service`` / ``job`` labels). The files are
read by adapters/catalog/backstage.py; a document that does not parse is kept in ``problems`` with its file and
line, and the rest still loads.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

KINDS = ("component", "resource")
#: Annotations that override what the checks query for one component (core/evidence/queries.py).
SELECTOR_ANNOTATION = "decklog.io/prometheus-selector"
QUERY_ANNOTATION_PREFIX = "decklog.io/query-"


def entity_name(ref: str) -> str:
    """``component:default/payments`` → ``payments``; ``payments`` → ``payments``."""
    name = ref.split(":", 1)[1] if ":" in ref else ref
    return name.rsplit("/", 1)[-1].strip().lower()


@dataclass(frozen=True)
class Component:
    name: str
    kind: str = "component"
    type: str = ""
    owner: str = ""
    system: str = ""
    lifecycle: str = ""
    description: str = ""
    depends_on: tuple[str, ...] = ()
    links: tuple[dict[str, str], ...] = ()
    annotations: dict[str, str] = field(default_factory=dict)
    origin: str = ""  # file:line it came from

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind, "owner": self.owner, "system": self.system}
        if self.type:
            out["type"] = self.type
        if self.depends_on:
            out["depends_on"] = list(self.depends_on)
        if self.links:
            out["links"] = [dict(x) for x in self.links]
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out


def component_from(doc: Mapping[str, Any], origin: str) -> Component | None:
    """A Component or Resource entity as a ``Component``; None for the other kinds (Systems, Groups, APIs…).
    Raises ``ValueError`` naming what is wrong with an entity of a kind it reads."""
    kind = str(doc.get("kind", "")).lower()
    if kind not in KINDS:
        return None
    meta = doc.get("metadata")
    if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str) or not meta["name"].strip():
        raise ValueError(f"a {kind} needs metadata.name")
    spec = doc.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise ValueError(f"{meta['name']}: spec must be a mapping")
    depends = spec.get("dependsOn") or []
    if not isinstance(depends, list) or not all(isinstance(d, str) for d in depends):
        raise ValueError(f"{meta['name']}: spec.dependsOn must be a list of entity references")
    annotations = meta.get("annotations") or {}
    links = meta.get("links") or []
    return Component(
        name=entity_name(meta["name"]),
        kind=kind,
        type=str(spec.get("type") or ""),
        owner=entity_name(str(spec.get("owner") or "")) if spec.get("owner") else "",
        system=entity_name(str(spec.get("system") or "")) if spec.get("system") else "",
        lifecycle=str(spec.get("lifecycle") or ""),
        description=str(meta.get("description") or ""),
        depends_on=tuple(dict.fromkeys(entity_name(d) for d in depends)),
        links=tuple(
            {"url": str(x.get("url", "")), "title": str(x.get("title", ""))}
            for x in links
            if isinstance(x, Mapping) and x.get("url")
        ),
        annotations={str(k): str(v) for k, v in annotations.items()} if isinstance(annotations, Mapping) else {},
        origin=origin,
    )


class ServiceCatalog:
    """Components by name, with the dependency graph. ``problems``: the entities that did not load (file:line)."""

    def __init__(self, components: Iterable[Component] = (), problems: Iterable[str] = ()) -> None:
        self.components: dict[str, Component] = {}
        for c in components:
            self.components.setdefault(c.name, c)
        self.problems = tuple(problems)

    def __len__(self) -> int:
        return len(self.components)

    def get(self, name: str) -> Component | None:
        return self.components.get(name.strip().lower())

    def dependencies(self, name: str, *, depth: int = 3, limit: int = 20) -> list[tuple[str, int]]:
        """What ``name`` depends on, breadth first, with each one's distance (1 = direct), at most ``depth`` levels
        and ``limit`` names; a cycle is walked once."""
        seen = {name.lower()}
        out: list[tuple[str, int]] = []
        frontier = [name.lower()]
        for level in range(1, depth + 1):
            nxt: list[str] = []
            for current in frontier:
                comp = self.components.get(current)
                for dep in comp.depends_on if comp else ():
                    if dep not in seen:
                        seen.add(dep)
                        out.append((dep, level))
                        nxt.append(dep)
                        if len(out) >= limit:
                            return out
            frontier = nxt
        return out

    def dependents(self, name: str) -> list[str]:
        """The components that depend on ``name`` directly."""
        key = name.lower()
        return sorted(c.name for c in self.components.values() if key in c.depends_on)

    def depends_on(self, upper: str, lower: str, *, depth: int = 6) -> bool:
        """Does ``upper`` depend on ``lower``, directly or through others?"""
        return any(n == lower.lower() for n, _ in self.dependencies(upper, depth=depth, limit=200))
