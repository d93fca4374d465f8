"""Build hook: the wheel carries the Lambda handlers, so an installed NodeHeal can build its asset.

Everything else about the distribution is in pyproject.toml. The handlers live at the top of the
checkout (``lambdas/``: the functions' handler paths are ``lambdas.<task>.handler``), outside the
``nodeheal`` package that package discovery ships; this copies them, with their requirements.txt,
into the built ``nodeheal/cdk/lambda_handlers/``, where ``nodeheal.cdk.lambda_asset`` looks for them.
They are never imported from there, only copied into the asset as ``lambdas/``.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HANDLERS = Path(__file__).resolve().parent / "lambdas"
PACKAGED_HANDLERS = Path("nodeheal", "cdk", "lambda_handlers")


# setuptools ships no type information for its commands.
class BuildPyWithLambdaHandlers(build_py):  # type: ignore[misc]
    def run(self) -> None:
        super().run()
        # An editable install runs from the checkout, where lambda_asset finds lambdas/ itself.
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / PACKAGED_HANDLERS
        self.mkpath(str(target))
        for source in [*sorted(HANDLERS.glob("*.py")), HANDLERS / "requirements.txt"]:
            self.copy_file(str(source), str(target / source.name))


setup(cmdclass={"build_py": BuildPyWithLambdaHandlers})
