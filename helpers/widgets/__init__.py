"""Callbacks behind the chapters' ipywidgets explorers: plain functions, testable without a
browser (slider values in, figure or table data out).

Each explorer ``x`` has four parts, so a test can check the numbers without drawing and a
chapter can draw without sliders:

- ``XControls``: a frozen dataclass of the explorer's knobs and their defaults, declared
  once; the view function, the callback and the chapter's ``interact`` cell read it;
- ``x_view(controls)`` (or a name for what it computes, such as ``memory_budget``): a
  dataclass of plain numbers built from library calls and records; no formula or
  experiment lives in a widget (measured data, such as a sweep, comes in beside the
  controls);
- ``draw_x(ax, view)``: draws that dataclass on a matplotlib Axes (chapter 5's, on two);
- ``show_x(**controls)``: the sliders' callback; it builds ``XControls(**controls)`` and the
  view, prints the view's table, shows the figure (``figures.show_figure``) and returns
  nothing, since ``interact`` would print a returned value's repr under the figure.

``tests/repository/test_architecture.py`` checks the convention on every module here.
"""
