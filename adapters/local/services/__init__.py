"""Fake executor targets on loopback: a deploy service and a Statuspage-compatible API.

Used by the tests, by ``decklog demo`` and by the local sandbox, so that actions have something real-looking
to act on with no network:

* :class:`FakeDeployService` speaks decklog's ``http`` executor wire protocol (DESIGN.md §7): ``POST <path>``
  with JSON ``{action, params, scope, run_id, fence, idempotency_key}`` and an ``Idempotency-Key`` header;
  2xx = applied (JSON body describing the effect), 4xx = refused (nothing applied), 5xx / timeout / lost
  connection = uncertain; ``GET /reconcile/<idempotency_key>`` answers 200 ``{"status": "applied", ...}`` /
  200 ``{"status": "not_applied"}`` / 404 unknown. It also keeps a deploy history (``record_deploy``,
  ``POST /deploys``, ``GET /deploys?service=``) so a "recent deploy" exists to roll back.
* :class:`FakeStatuspage` is a subset of the Atlassian Statuspage REST API v1 (incidents: create, update,
  get, list) authenticated with ``Authorization: OAuth <api key>``, as the real API is.

Both apply an effect at most once per ``Idempotency-Key``: a repeat with the same key and body gets the
byte-identical stored response and applies nothing; the same key with another body is refused (422).
Faults are queued through one hook, ``inject(Fault(...))`` (the test fakes' ``service_faults(svc)`` offers
``fail_next``, ``refuse_next``, ``delay_next``, ``apply_then_drop_next``, ``drop_next``: tests/fakes/service_faults.py);
each fault is consumed by the next effect request (or the next read with ``on="read"``).
Everything received is recorded in ``.calls`` and every applied effect in ``.effects``.

The deploy service's state (history, effects, idempotency keys, fences) round-trips through plain data
(``to_dict`` / ``from_dict`` / ``load_dict``), so the local sandbox can keep it across restarts; ``on_change``
tells the keeper when to save. No file I/O here.
"""

from decklog.adapters.local.services.deploy import FakeDeployService
from decklog.adapters.local.services.deploy_state import DEPLOY_STATE_FORMAT, DEPLOY_STATE_VERSION
from decklog.adapters.local.services.loopback import ApplyWhen, Call, Effect, Fault, FaultOn, Outcome
from decklog.adapters.local.services.statuspage import FakeStatuspage

__all__ = [
    "DEPLOY_STATE_FORMAT",
    "DEPLOY_STATE_VERSION",
    "ApplyWhen",
    "Call",
    "Effect",
    "FakeDeployService",
    "FakeStatuspage",
    "Fault",
    "FaultOn",
    "Outcome",
]
