"""What a run's numbers become: :mod:`.records` (the measurements and their aggregation over
seeds), :mod:`.results` (``results.json`` and ``results.csv``), :mod:`.rows` (an
experiment's rows, as its figure and summary read them), :mod:`.panels` (the tables),
:mod:`.plotting` (the figures' shared drawing), :mod:`.figures`, :mod:`.summary`,
:mod:`.headlines` (the few plain sentences that lead it), :mod:`.report` (``report.html``),
:mod:`.compare` (two runs side by side) and :mod:`.reading` (a run's numbers for the guide,
and the rule both judge a run that learned nothing by)."""
