"""chorus packages: a model's Python code and weights in one torch.package archive.

Writer side (plain Python, the pinned interpreter):

    from chorus.package import create_package
    create_package("mlp.pt", model, example_inputs=(torch.randn(2, 4),), name="mlp")

Command line: ``chorus-package create|check|inspect`` (``python -m chorus.package``).
Reader side (inside chorus interpreters): ``chorus.package.importer``.
The format is specified in docs/package-format.md.
"""

from chorus.package.create import (PackagingError, PackagingRules, create_package,
                                   installed_modules)
from chorus.package.manifest import ManifestError, read_manifest

__all__ = ["create_package", "installed_modules", "read_manifest", "PackagingError",
           "PackagingRules", "ManifestError"]
