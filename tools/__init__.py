"""Tools kept beside the package and never shipped in the wheel: the chaos harness
(``python -m tools.chaos``), the web load generator and the browser installer."""
