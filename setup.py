"""The one thing pyproject.toml cannot say: the repository's top-level folders are installed under ``decklog``.

``core/``, ``adapters/``, ``bot/`` and ``prompts/`` stay at the top of the repository; the distribution (wheel,
``pip install .`` and ``pip install -e .``) puts them under one import namespace, ``decklog.core`` and so on, so
that nothing named ``core`` or ``bot`` lands at the top of site-packages. research/, bench/ and tests/ are not
part of it: they use decklog as any user does.
"""

from setuptools import find_namespace_packages, setup

PRODUCT = ("core", "adapters", "bot", "prompts")

setup(
    package_dir={"decklog": "."},
    packages=[
        f"decklog.{name}"
        for name in find_namespace_packages(include=[f"{top}*" for top in PRODUCT])
        if "__pycache__" not in name
    ],
)
