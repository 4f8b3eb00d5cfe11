"""ITBench SRE scenarios run in the lab: each scenario's injected fault becomes a lab fault on the matching shop
service; its ground truth goes to the judge only.

Works on any folder of the ITBench layout (``scenario_N/{scenario,groundtruth[,groundtruth_v1],incident}.yaml``,
as in ``itbench-hub/ITBench-Scenarios`` ``sre/roles/scenarios/files/``). From ``scenario.yaml`` the importer reads
each injection's mechanism (``id``) and its Kubernetes object (the OpenTelemetry demo's Deployment or Service,
which names the shop service; a Chaos Mesh schedule's label selector; a flagd flag). The mechanism decides the lab
fault (``MECHANISMS``): a workload change (image, init container, environment, DNS policy, probe, port, quota,
node placement) is a change reported to decklog whose effect the callers feel; a Chaos Mesh experiment is a fault
with no change; a feature flag is a flag flip.

``groundtruth.yaml`` (and ``groundtruth_v1.yaml``) decide what a correct answer is: the root-cause entities, mapped
to shop services, and the first solution's kind (mapped to a lab action). They are stored in
:class:`~research.lab.scenario.Truth` and never reach the world: the world's change reports are built from the
injection only (service, and for an environment change the variable's name), and nothing of the incident's name,
the propagation or the solutions.

A scenario the lab cannot reproduce is returned as :class:`~research.lab.scenario.Skipped` with the reason.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from research.lab.graph import FLAGS, SERVICES
from research.lab.scenario import BadScenario, Case, Expect, Scenario, Skipped, Step, Truth

NAMESPACE = "otel-demo"
#: mechanism id → (lab fault kind, params, the lab action that ends it)
MECHANISMS: dict[str, tuple[str, dict[str, Any], str]] = {
    "nonexistent-kubernetes-workload-container-image": ("bad_deploy", {"effect": "down"}, "rollback_deploy"),
    "hanging-kubernetes-workload-init-container": ("bad_deploy", {"effect": "down"}, "rollback_deploy"),
    "modified-kubernetes-workload-container-environment-variable": (
        "config_change",
        {"effect": "errors", "rate": 1.0},
        "revert_config",
    ),
    "failing-name-resolution-kubernetes-workload-dns-policy": (
        "config_change",
        {"effect": "errors", "rate": 1.0, "key": "dnsPolicy"},
        "revert_config",
    ),
    "misconfigured-kuberntes-workload-container-readiness-probe": (
        "config_change",
        {"effect": "errors", "rate": 0.5, "key": "readinessProbe"},
        "revert_config",
    ),
    "modified-target-port-kubernetes-service": (
        "config_change",
        {"effect": "down", "key": "targetPort"},
        "revert_config",
    ),
    "insufficent-kubernetes-resource-quota": (
        "config_change",
        {"effect": "down", "key": "resourceQuota"},
        "revert_config",
    ),
    "nonexistent-kubernetes-workload-node": (
        "config_change",
        {"effect": "down", "key": "nodeSelector"},
        "revert_config",
    ),
    "cordoned-kubernetes-worker-node": ("config_change", {"effect": "down", "key": "nodeSelector"}, "revert_config"),
    "unassigned-kubernetes-workload-container-resource-limits": (
        "config_change",
        {"effect": "none", "key": "resources"},
        "revert_config",
    ),
}
CHAOS = "scheduled-chaos-mesh-experiment"
FLAG = "opentelemetry-demo-feature-flag"


def _read(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise BadScenario(f"{path}: {exc}") from None
    if not isinstance(data, dict):
        raise BadScenario(f"{path}: expected a mapping")
    return data


def _service(name: str) -> str | None:
    name = name.removesuffix("service") if name.endswith("service") and name[:-7] in SERVICES else name
    return name if name in SERVICES else None


def _chaos_step(args: dict[str, Any]) -> tuple[Step, str] | str:
    spec = args.get("scheduleSpec") or {}
    kind = str(spec.get("type", ""))
    body = spec.get("httpChaos") or spec.get("stressChaos") or spec.get("networkChaos") or spec.get("podChaos") or {}
    labels = ((body.get("selector") or {}).get("labelSelectors")) or {}
    service = _service(str(labels.get("app.kubernetes.io/component", "")))
    if service is None:
        return f"the {kind or 'chaos'} experiment selects {labels or 'nothing'}, not a shop service"
    if kind == "HTTPChaos":
        return Step(kind="errors", target=service, params={"rate": 0.9}), "restart"
    if kind == "StressChaos":
        resource = "memory" if "memory" in (body.get("stressors") or {}) else "cpu"
        return Step(kind="saturation", target=service, params={"resource": resource}), (
            "restart" if resource == "memory" else "scale_up"
        )
    return f"a {kind or 'chaos'} experiment has no lab equivalent yet"


def _injection(injection: dict[str, Any]) -> tuple[Step, str] | str:
    """(the lab fault, the action that ends it), or why it cannot be reproduced."""
    mechanism = str(injection.get("id", ""))
    args = injection.get("args") or {}
    obj = args.get("kubernetesObject") or {}
    meta = obj.get("metadata") or {}
    if mechanism == FLAG:
        flag = str((args.get("flag") or {}).get("name", ""))
        if flag not in FLAGS:
            return f"feature flag {flag!r} has no lab effect"
        return Step(kind="flag_on", params={"flag": flag}), "flag_off"
    if mechanism == CHAOS:
        return _chaos_step(args)
    if mechanism not in MECHANISMS:
        return f"mechanism {mechanism!r} has no lab equivalent"
    if meta.get("namespace") not in (None, NAMESPACE):
        return (
            f"{obj.get('kind', 'object')} {meta.get('name')} is in namespace {meta.get('namespace')!r}, not the shop's"
        )
    service = _service(str(meta.get("name", "")))
    if service is None:
        return f"{obj.get('kind', 'object')} {meta.get('name')!r} is not a shop service"
    kind, params, fix = MECHANISMS[mechanism]
    params = dict(params)
    env = (args.get("container") or {}).get("env") or []
    if env and "key" not in params:
        params["key"] = ",".join(str(e.get("name", "")) for e in env if isinstance(e, dict))
    return Step(kind=kind, target=service, params=params), fix


def _truth_services(groundtruth: dict[str, Any], steps: list[Step]) -> list[str]:
    """The ground truth's root-cause entities as shop services (a flag's ConfigMap → the flag's service)."""
    found: list[str] = []
    for entity in (groundtruth.get("spec") or {}).get("entities") or []:
        meta = entity.get("metadata") or {}
        name = str(meta.get("name", ""))
        service = _service(name)
        if service is None and name == "flagd-config":
            service = next((FLAGS[str(s.params["flag"])][0] for s in steps if s.kind == "flag_on"), None)
        if service is None:
            service = next((s.target for s in steps if s.target and s.target in name), None)
        if service is not None and service not in found:
            found.append(service)
    return found


def import_one(directory: Path) -> Case | Skipped:
    scenario = _read(directory / "scenario.yaml")
    groundtruth = _read(directory / "groundtruth.yaml")
    ident = directory.name.removeprefix("scenario_")
    name = f"itbench-{ident}"
    source = f"itbench:{ident}"
    injections = [i for f in (scenario.get("spec") or {}).get("faults") or [] for i in f.get("injections") or []]
    if not injections:
        return Skipped(name=name, source=source, reason="no fault is injected (nothing the lab can show)")
    steps: list[Step] = []
    fixes: list[str] = []
    for injection in injections:
        mapped = _injection(injection)
        if isinstance(mapped, str):
            return Skipped(name=name, source=source, reason=mapped)
        steps.append(mapped[0].model_copy(update={"at": 0.0}))
        fixes.append(mapped[1])
    causes = _truth_services(groundtruth, steps) or [s.target or FLAGS[str(s.params["flag"])][0] for s in steps]
    # the action that ends the faults that hurt (a harmless change alongside a chaos experiment is not the fix)
    effective = [f for s, f in zip(steps, fixes, strict=True) if s.params.get("effect") != "none"]
    truth: dict[str, Any] = {"groundtruth": groundtruth}
    if (directory / "groundtruth_v1.yaml").exists():
        truth["groundtruth_v1"] = _read(directory / "groundtruth_v1.yaml")
    return Case(
        scenario=Scenario(name=name, faults=tuple(steps), duration=75),
        truth=Truth(expect=Expect(root_cause=causes, fix=(effective or fixes)[0]), source=source, ground_truth=truth),
    )


def import_dir(directory: Path) -> tuple[list[Case], list[Skipped]]:
    if not directory.is_dir():
        raise BadScenario(f"--import-itbench {directory}: not a directory")
    folders = sorted(p for p in directory.iterdir() if p.is_dir() and (p / "scenario.yaml").exists())
    if not folders:
        raise BadScenario(f"--import-itbench {directory}: no scenario_*/scenario.yaml in it")
    cases: list[Case] = []
    skipped: list[Skipped] = []
    for folder in folders:
        if not (folder / "groundtruth.yaml").exists():
            skipped.append(Skipped(name=folder.name, source=f"itbench:{folder.name}", reason="no groundtruth.yaml"))
            continue
        result = import_one(folder)
        (cases if isinstance(result, Case) else skipped).append(result)  # type: ignore[arg-type]
    return cases, skipped
