"""nbgrader's course configuration, for instructors who use nbgrader's own tools (formgrader,
``nbgrader validate``, ``nbgrader autograde``) next to ``python -m grading``.

nbgrader reads ``nbgrader_config.py`` from the working folder, so either run it from here::

    cd grading && nbgrader validate ../solutions/01_flops/01_flops.ipynb

or point Jupyter at this folder (``JUPYTER_CONFIG_PATH=$PWD/grading jupyter lab``), which
also makes JupyterLab's Validate button use it. Source is ``solutions/``, release is
``notebooks/``; everything else nbgrader writes (submitted/, autograded/, feedback/,
gradebook.db) goes to ``grading/course/``, which git ignores.
"""

import os

c = get_config()  # noqa: F821 - provided by traitlets when it loads this file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COURSE = os.path.join(ROOT, "grading", "course")

c.CourseDirectory.root = COURSE
c.CourseDirectory.source_directory = os.path.join(ROOT, "solutions")
c.CourseDirectory.release_directory = os.path.join(ROOT, "notebooks")
c.CourseDirectory.db_url = "sqlite:///" + os.path.join(COURSE, "gradebook.db")
c.CourseDirectory.ignore = [".ipynb_checkpoints", "*.pyc", "__pycache__", ".*"]

# Limits for nbgrader's own execution (python -m grading sets its own, per question).
c.Execute.timeout = 60
c.Execute.interrupt_on_timeout = True
c.LimitOutput.max_lines = 1000
c.LimitOutput.max_traceback = 100

# A deleted test cell is restored and graded, not left for manual grading.
c.OverwriteCells.add_missing_cells = True

# nbgrader scores 0 on a test cell that wrote to stderr: the kernel shows stderr as
# ordinary output instead (see grading/streams.py), so a warning costs no points.
c.Execute.extra_arguments = [
    "--HistoryManager.hist_file=:memory:",
    "--IPKernelApp.outstream_class=grading.streams.StderrAsStdout",
]

# Self-check of written answers: True makes `python -m grading release` put each written
# answer's model answer and rubric into the release (cell metadata), so a learner working
# alone can compare with `python -m grading check NOTEBOOK --rubrics`. Off for a classroom:
# the release then holds no model answer. (nbgrader's own tools ignore this section.)
c.SelfCheck.rubrics = False
