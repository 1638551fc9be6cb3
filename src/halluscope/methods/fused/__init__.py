"""The fused verifier: the verdict-first judge's P(supported) fused with the claim's lexical support (the gate's
findings, ROUGE precision against its best source window, optional embedding similarity), its length and its
position, by a small logistic model fitted on labelled pairs (``halluscope fit-verifier``).

* :mod:`~halluscope.methods.fused.features`: one typed record of features per claim, from the stages that already
  produce them (no LLM call of its own);
* :mod:`~halluscope.methods.fused.model`: the fitted model as one readable JSON file, applied with numpy only;
* :mod:`~halluscope.methods.fused.verifier`: the ``fused`` verifier stage (``-o verifier=fused[:FILE]``).
"""
