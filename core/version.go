package core

import "github.com/dbinformer/dbinformer/core/driver"

// ResourceVersion is a position in a source's history: what WaitFor waits
// for and SyncStatus reports. Sources number their changes with it (see
// driver.ResourceVersion, where it is declared with the contract it is part
// of); it is named here too because a user holds and passes versions
// without ever implementing a source.
type ResourceVersion = driver.ResourceVersion
