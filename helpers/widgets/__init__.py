"""Callbacks behind the chapters' ipywidgets explorers: plain functions, testable without a
browser (slider values in, figure or table data out).

Each explorer ``x`` has three parts, so a test can check the numbers without drawing and a
chapter can draw without sliders:

- ``x_view(...)`` (or a name for what it computes, such as ``memory_budget``): a dataclass
  of plain numbers built from library calls; no formula or experiment lives in a widget;
- ``draw_x(ax, view)``: draws that dataclass on a matplotlib Axes;
- ``show_x(**controls)``: the sliders' callback; it prints the view's table, shows the
  figure (``figures.show_figure``) and returns nothing, since ``interact`` would print a
  returned value's repr under the figure.

The roofline and matmul explorers (``roofline.draw``, ``matmuls.draw``) draw several Axes
from one call and keep one ``draw``/``show`` pair per module.
"""
