"""The benchmark harness: the zoo of networks (``cli``, ``measure``, ``raw``, ``render``), the
per-layer benchmark (``layers``), the tuner breakdown (``tuner``, ``roofline``), and what they share (``networks``, ``timing``,
``stats``, ``results``; ``internal`` is their one door into the package beyond its public API)."""
