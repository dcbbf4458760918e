from cascade_cli.cli.app import main

main()
