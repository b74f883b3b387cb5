"""``-k auto``: how many tokens each step proposes, chosen from what proposals earn and what steps cost.

- :mod:`.controller`: the choice each step (:class:`~.controller.AdaptiveLength`) and a fixed k's stand-in
  (:class:`~.controller.FixedLength`), behind the seam the step calls: ``choose``, ``observe_step``,
  ``observe_row``, ``keep_rows``, ``finish``;
- :mod:`.costs`: what a step costs, fitted while a call runs and kept per machine for later processes;
- :mod:`.tuning`: every constant both use, in one frozen object.
"""
