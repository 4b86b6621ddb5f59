"""The judges: each lesson's checks, which compute the references and decide a test cell's verdict.

At grading they run in the grader's process (course_tools.grading.verdict), never in the student's
kernel: inside the grading sandbox every module of this folder is replaced by a stub
(course_tools.grading.sandbox_command), so a student's cell cannot call a reference as its answer.
The test cells import them; the setup cells import only what a student uses.
"""
