"""Renderers: each takes a RunReport and returns text or a rich renderable; none decides an outcome."""
