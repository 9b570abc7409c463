"""The offline end-to-end demo (``make demo``) and its HTML report."""
