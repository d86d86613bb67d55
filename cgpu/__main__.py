from cgpu.cli import main

raise SystemExit(main())
