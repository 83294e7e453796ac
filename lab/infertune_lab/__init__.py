"""infertune's lab: the digital twin (`sim`), the closed-loop demo (`demo`) and the benchmark
(`bench`). They drive the operator's own reconciler through in-memory ports and never ship in the
operator's image."""
