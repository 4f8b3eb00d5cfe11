"""The shop's service graph, copied from the OpenTelemetry demo, and its Backstage catalog.

Source: github.com/open-telemetry/opentelemetry-demo at commit 054282e3 (2026-08-22): the services and their
``depends_on`` / ``*_ADDR`` wiring in ``compose.yaml`` (fraud-detection from ``compose.full.yaml``, where it reads
checkout's orders from Kafka: here checkout calls it, optionally, since the lab has no queue), and the feature
flags of ``src/flagd/demo.flagd.json``. The demo's infrastructure (otel-collector, flagd, frontend-proxy,
image-provider, astronomy-db, kafka) is left out; ``cart-cache`` stands for ``valkey-cart``.

How a request travels (``CALLS``): the frontend serves a page by calling the catalog, currency, ads,
recommendations and the cart, and every third page is a checkout (checkout and shipping). Calls to ``OPTIONAL``
dependencies degrade the page instead of failing it, as the demo's frontend does for ads and recommendations.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SYSTEM = "astronomy-shop"

#: service → (owner, what it is); the demo's languages are kept in the description for flavour only.
SERVICES: dict[str, tuple[str, str]] = {
    "frontend": ("team-web", "Web frontend (Next.js in the demo): serves pages, calls the backends"),
    "cart": ("team-checkout", "Shopping cart (.NET in the demo), stores carts in cart-cache"),
    "cart-cache": ("team-checkout", "The cart's cache (valkey-cart in the demo)"),
    "checkout": ("team-checkout", "Places orders (Go in the demo): cart, currency, payment, shipping, email"),
    "payment": ("team-payments", "Charges cards (Node.js in the demo)"),
    "shipping": ("team-checkout", "Shipping costs and tracking (Rust in the demo), prices via quote"),
    "quote": ("team-checkout", "Shipping quotes (PHP in the demo)"),
    "currency": ("team-web", "Currency conversion (C++ in the demo)"),
    "email": ("team-checkout", "Order confirmation emails (Ruby in the demo)"),
    "product-catalog": ("team-catalog", "The product list (Go in the demo)"),
    "recommendation": ("team-catalog", "Product recommendations (Python in the demo)"),
    "ad": ("team-web", "Contextual ads (Java in the demo)"),
    "fraud-detection": ("team-payments", "Checks orders for fraud (Kotlin in the demo, a Kafka consumer)"),
}

#: service → the services it depends on (compose.yaml ``depends_on`` without the infrastructure).
DEPENDS_ON: dict[str, tuple[str, ...]] = {
    "frontend": ("ad", "cart", "checkout", "currency", "product-catalog", "quote", "recommendation", "shipping"),
    "cart": ("cart-cache",),
    "checkout": ("cart", "currency", "email", "payment", "product-catalog", "shipping", "fraud-detection"),
    "recommendation": ("product-catalog",),
    "shipping": ("quote",),
}

#: What one request to a service calls: every request (first tuple) and every third one (second tuple).
CALLS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "frontend": (("product-catalog", "currency", "ad", "recommendation", "cart"), ("checkout",)),
    "cart": (("cart-cache",), ()),
    "checkout": (("cart", "currency", "product-catalog", "shipping", "payment", "email", "fraud-detection"), ()),
    "recommendation": (("product-catalog",), ()),
    "shipping": (("quote",), ()),
}

#: (caller, dependency) pairs whose failure degrades the caller's answer instead of failing it.
OPTIONAL = {("frontend", "ad"), ("frontend", "recommendation"), ("checkout", "fraud-detection")}

#: The demo's flagd flags that the lab reproduces: flag → (service, effect, default parameters).
FLAGS: dict[str, tuple[str, str, dict[str, Any]]] = {
    "adFailure": ("ad", "errors", {"rate": 0.9}),
    "adHighCpu": ("ad", "saturation", {"resource": "cpu"}),
    "cartFailure": ("cart", "errors", {"rate": 0.5}),
    "emailMemoryLeak": ("email", "saturation", {"resource": "memory"}),
    "failedReadinessProbe": ("cart", "down", {}),
    "imageSlowLoad": ("frontend", "latency", {"seconds": 1.0}),
    "loadGeneratorFloodHomepage": ("frontend", "flood", {"rps": 40}),
    "paymentFailure": ("payment", "errors", {"rate": 0.5}),
    "paymentUnreachable": ("payment", "down", {}),
    "productCatalogFailure": ("product-catalog", "errors", {"rate": 0.3}),
    "recommendationCacheFailure": ("recommendation", "latency", {"seconds": 1.0}),
}


def dependents(service: str) -> list[str]:
    """The services that depend on ``service`` directly."""
    return sorted(s for s, deps in DEPENDS_ON.items() if service in deps)


def catalog_documents() -> list[dict[str, Any]]:
    """The shop as Backstage entities: one System and one Component per service (``spec.dependsOn``)."""
    docs: list[dict[str, Any]] = [
        {
            "apiVersion": "backstage.io/v1alpha1",
            "kind": "System",
            "metadata": {"name": SYSTEM, "description": "The OpenTelemetry demo's shop, run by the lab"},
            "spec": {"owner": "team-web"},
        }
    ]
    for name, (owner, description) in SERVICES.items():
        spec: dict[str, Any] = {"type": "service", "lifecycle": "production", "owner": owner, "system": SYSTEM}
        deps = DEPENDS_ON.get(name, ())
        if deps:
            spec["dependsOn"] = [f"component:default/{d}" for d in deps]
        docs.append(
            {
                "apiVersion": "backstage.io/v1alpha1",
                "kind": "Component",
                "metadata": {"name": name, "description": description},
                "spec": spec,
            }
        )
    return docs


def write_catalog(path: Path) -> Path:
    """Writes ``catalog-info.yaml`` (all entities, ``---``-separated) and returns its path."""
    path.write_text(yaml.safe_dump_all(catalog_documents(), sort_keys=False))
    return path
