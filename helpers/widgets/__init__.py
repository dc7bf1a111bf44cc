"""Callbacks behind the chapters' ipywidgets explorers: plain functions, testable without a
browser (slider values in, figure or table data out)."""
