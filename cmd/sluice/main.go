// Command sluice runs the Sluice rate-limiting gateway.
//
//	sluice serve --config FILE    run the gateway
//	sluice check-config FILE      validate a config file and exit
//	sluice client ...             manage per-client overrides (admin API)
//	sluice key ...                look at or reset a key (admin API)
//	sluice descriptor ...         look at, reset or override a descriptor (admin API)
//	sluice version                print the version (also --version)
//	sluice help [COMMAND]         print the usage, or COMMAND's (also COMMAND -h)
//
// serve stops gracefully on SIGINT and SIGTERM, and reloads its config
// file on SIGHUP (and by itself when the file changes).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sluicehq/sluice/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
