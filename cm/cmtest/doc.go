// Package cmtest is the test harness of the CM protocol engine and of the
// managers built on it: a fake clock and an in-memory lossy MAD fabric,
// with the checks their tests share. Only tests import it.
//
// The engine reads no clock and answers through callbacks, so a test can
// run it without goroutines, sleeps or real time. A Fabric connects Nodes
// (a *cm.Engine, or anything that hands MADs to one, such as ipoibcm's
// managers) by GID:
//
//	f := cmtest.NewFabric[cm.AttrID](t)
//	e := cm.NewEngine(cm.EngineConfig{GID: g, Send: f.Sender(g), ...})
//	f.Add(g, e)
//
// A node's Send callback (Sender) enqueues its MADs on the fabric and logs
// them; the test then decides what is delivered, lost, repeated or
// reordered: Step, Drain, DeliverWhere and Take hand over or remove single
// MADs, DropNth, DupNth, DropAll and Filter lose or repeat them as they
// are sent, LIFO delivers the newest first. Run delivers everything and
// calls each node's Expire at its Next deadline, moving the fake clock
// (Now, starting at T0) forward. Sent and Log show what was sent,
// Inject hands a node a message as if another node had sent it, and
// Decode reads a logged MAD back with the caller's decoder.
//
// The fabric is generic over the attribute ID's type (cm.AttrID) so that
// it reads MADs without importing package cm: cm's own tests are inside
// package cm and use it too. It relies only on the MAD common header
// (package mad): the attribute ID at octets 16-17 and the transaction ID
// at 8-15.
package cmtest
