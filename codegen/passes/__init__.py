"""Passes over block IR. Each is a module with a `name` and an `apply(fn, ctx)`; the
pipeline in `kiln.codegen.pipeline` lists them in order."""
