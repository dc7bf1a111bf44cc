"""The grader's own tools, apart from the product: ``python -m grading.tools.benchmark``
(grading speed against plain sequential nbgrader) and ``python -m grading.tools.stress``
(a batch graded again and again under load, every verdict the same)."""
