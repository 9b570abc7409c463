"""Training-data construction of the papers: tool curation (Lang2Act), distillation, difficulty.

Submodules are imported on demand (``from evidra.data.construction import toolbox``) so that
importing the package stays cheap.
"""
