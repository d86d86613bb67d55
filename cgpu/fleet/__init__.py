"""Fleet use: the report as Node Feature Discovery labels (`nfd`), kept fresh by `cgpu watch` (`watch`)."""
