from trainwreck.cli import main

raise SystemExit(main())
